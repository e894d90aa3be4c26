// emu/nvtx3/nvToolsExt.h: NVTX's range markers for the CPU emulation build. On a GPU build they are
// NVTX3's own (header-only, free when no profiler is attached); here they delimit what the emulator's
// report counts per range (emu/report.cpp).
#ifndef EMU_NVTOOLSEXT_H
#define EMU_NVTOOLSEXT_H

int nvtxRangePushA(const char *message);
int nvtxRangePop(void);

#endif // EMU_NVTOOLSEXT_H
