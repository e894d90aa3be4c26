// core/attention_choice.h: --attention's choices and the attention each plans in this build; shared by
// the memory and time plans, --dry_run, both trainers and gpu/attention.cuh, which need no more of cli.h.
#ifndef ATTENTION_CHOICE_H
#define ATTENTION_CHOICE_H

// The CUDA trainer's attention (gpu/attention.cuh); the CPU trainer has one, which `exact` matches.
typedef enum { ATTENTION_AUTO = 0, ATTENTION_FAST = 1, ATTENTION_EXACT = 2 } AttentionChoice;
// Which attention this binary runs for --attention (AttentionChoice), the one answer the memory plan, the
// time plan and the trainer (gpu/attention.cuh's attention_setup) take: cuDNN's fused attention for fast, or
// for auto in a build with cuDNN (USE_CUDNN: the CUDA trainer built with it); else the exact kernels (a `make
// train` without cuDNN's headers, and the CPU trainer's and the emulator's --dry_run: --attention fast plans
// the fused one there). The trainer plans auto without it where the plan with it does not fit the device
// (gpt_alloc), or cuDNN declines the shape (attention_setup), and says so at start.
static inline int plan_fast_attention(int attention) {
#ifdef USE_CUDNN
    return attention != ATTENTION_EXACT;
#else
    return attention == ATTENTION_FAST;
#endif
}

// The planned attention and why, for the plan's and the start-up lines.
static inline const char *plan_attention_label(int attention) {
    if (attention == ATTENTION_EXACT) return "exact kernels: --attention exact";
    if (attention == ATTENTION_FAST) return "cuDNN's fused attention: --attention fast";
#ifdef USE_CUDNN
    return "cuDNN's fused attention: --attention auto in a build with cuDNN";
#else
    return "exact kernels: --attention auto in a build without cuDNN (--attention fast plans cuDNN's)";
#endif
}

#endif // ATTENTION_CHOICE_H
