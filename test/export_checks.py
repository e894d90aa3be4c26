"""What test_export.sh's Python checks share: the PASS/FAIL lines it reads, relative errors, fp8_scaling.h's
own conversions (the program test_export.sh compiles into its temporary directory as conv), the trainer's
debug states (debug_state.h) and FP8-weight model files.

    import export_checks as xc
    xc.TMP = tmp                     # test_export.sh's temporary directory: conv, the debug states
"""
import os
import subprocess
import sys
import traceback

import numpy as np

from debug_state import read as read_debug_state

TMP = None


def report(ok, what, detail=""):
    print(("PASS" if ok else "FAIL") + "\t" + what + (f" [{detail}]" if detail else ""), flush=True)


def check(what, fn):
    """One check: fn returns ok or (ok, detail); an exception fails it, with its traceback."""
    try:
        r = fn()
        ok, detail = r if isinstance(r, tuple) else (r, "")
        report(bool(ok), what, detail)
    except Exception as e:
        report(False, what, f"{type(e).__name__}: {e}")
        traceback.print_exc(file=sys.stdout)


def rel(a, b):
    """relative L2 error of a against the reference b, in float64"""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def oracle(mode, x, margin=None):
    """fp8_scaling.h on the float32 array x (see conv.c in test_export.sh)"""
    src, dst = os.path.join(TMP, "conv_in.bin"), os.path.join(TMP, "conv_out.bin")
    np.ascontiguousarray(x, "<f4").tofile(src)
    subprocess.run([os.path.join(TMP, "conv"), mode] + ([str(margin)] if margin is not None else []) + [src, dst],
                   check=True)
    out = np.fromfile(dst, dtype="u1")
    if mode == "bf16":
        return out.view("<u2")
    if mode == "quant":
        return out[4:], out[:4].view("<f4")[0]
    return out


def debug_state(name):
    """The trainer's first batch (B,T) and its float32 logits (B,T,V) (debug_state.py)."""
    d = read_debug_state(os.path.join(TMP, name))
    tokens = np.frombuffer(d.inputs, "<i4").reshape(d.B, d.T)
    return tokens, np.frombuffer(d.logits, "<f4").reshape(d.B, d.T, d.Vp)[..., :d.V]


def fp8_weight_model(src, dst, slices, header_bytes, e4m3_decode, bf16_decode):
    """dst = the version 3 model file src holding the weights the trainer's float8 forward reads: each slice
    (offset, count of its values: a GEMM weight) the values its FP8 GEMM multiplies, fp8_scaling.h's cast of the
    slice (exact amax, one scale) decoded times float32(1 / s), which is also an FP8 export's weight times its
    weight_scale_inv; every other value its BF16 copy (fp8_scaling.h's bf16_from_float), as the export's."""
    data = open(src, "rb").read()
    values = np.frombuffer(data, "<f4", offset=header_bytes).copy()
    out = bf16_decode(oracle("bf16", values))
    for offset, count in slices:
        codes, s = oracle("quant", values[offset:offset + count], 0)
        out[offset:offset + count] = e4m3_decode(codes) * (np.float32(1.0) / s)
    open(dst, "wb").write(data[:header_bytes] + out.astype("<f4").tobytes())
