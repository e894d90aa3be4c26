"""debug_state.py: a trainer's --debug_state file (core/debug_state.h's layout, the CPU-vs-GPU check file), read
by the Python checks: test/gpu_checks.py (test_gpu.sh), export_checks.py and import_checks.py (test_export.sh,
test_import.sh), test_llmc_llama.sh. Plain Python (no numpy); the sections stay the file's bytes.

    import debug_state
    d = debug_state.read(path)
    d.B, d.T, d.Vp, d.V, d.steps      header words 2, 3, 4, 9, 5
    d.inputs, d.targets               B*T int32 each, little-endian bytes
    d.logits                          B*T*Vp float32, bytes
    d.loss                            the first step's loss (a Python float: the float32 exactly)
    d.grads                           the accumulated gradients, float32 in the trainers' parameter layout, bytes
    d.step_losses                     the loss of every step the run made (Python floats)
"""
import struct

MAGIC, VERSION = 20261201, 1


class DebugState:
    def __init__(self, data, path):
        header = struct.unpack_from("<256i", data)
        if header[:2] != (MAGIC, VERSION):
            raise ValueError(f"{path}: not a debug state file (magic/version)")
        self.B, self.T, self.Vp, self.steps, self.V = header[2], header[3], header[4], header[5], header[9]
        n = self.B * self.T
        at = 4 * 256
        self.inputs, at = data[at:at + 4 * n], at + 4 * n
        self.targets, at = data[at:at + 4 * n], at + 4 * n
        self.logits, at = data[at:at + 4 * n * self.Vp], at + 4 * n * self.Vp
        (self.loss,), at = struct.unpack_from("<f", data, at), at + 4
        self.grads = data[at:len(data) - 4 * self.steps]
        self.step_losses = list(struct.unpack_from(f"<{self.steps}f", data, len(data) - 4 * self.steps))


def read(path):
    with open(path, "rb") as f:
        return DebugState(f.read(), path)
