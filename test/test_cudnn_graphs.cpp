// test_cudnn_graphs: the fast attention's cuDNN graphs (gpu/attention_cudnn.cpp) against cudnn-frontend's
// support rules, on a machine without a GPU (CI): for every model preset at its maximum sequence length and
// at the test shapes, GPT-2's (KVH = NH) and Llama's (KVH key/value heads shared by NH/KVH query heads each),
// for Hopper (sm_90) and Blackwell (sm_100), the forward (with softmax statistics) and the deterministic
// backward graph validate with this cuDNN version: tensor layouts over qkv, the causal mask, the statistics'
// shape, the options. A graph cuDNN cannot run (head size 512: sm_90's backward takes at most 256) must be
// refused with its reason, so the check can fail. Validation accepts any strided view, so the layouts are
// checked here: for sampled (b, h, t, d), each tensor's dims, strides and column put the element where
// gpu/attention.cuh's layouts have it (qkv (B,T,QKV) [q | k | v]: NH query heads, KVH key heads, KVH value
// heads, head h of each part at columns h*HS of the part; out, dout (B,T,C), lse (B,NH,T)), written out
// independently below. The deterministic backward runs on Blackwell from cuDNN 9.18 (cudnn-frontend refuses
// it below, in the validation cudnn_attention_create runs at start, so the trainer says so in one line
// there): `make test_cudnn_graphs` runs this test again with cudnnGetVersion answering 9.17.0
// (test/cudnn_version_shim.c), where every sm_100 graph must be refused with that reason and sm_90's still
// validate. What only a GPU shows
// (an execution plan exists, its results) is dev/bench_kernels.cu's and test/test_gpu.sh's.
#include <stdio.h>
#include <string.h>

#include "../core/gpt_model.h"
#include "../gpu/attention_cudnn.h"
#include "test_util.h"

static bool is_key(int tensor) {
    return tensor == ATT_K || tensor == ATT_DK;
}
static bool is_value(int tensor) {
    return tensor == ATT_V || tensor == ATT_DV;
}

// Where element (b, h, t, d) of tensor `tensor` lies in its buffer, by the documented layouts.
static size_t layout_offset(int tensor, int T, int C, int NH, int KVH, int b, int h, int t, int d) {
    const size_t HS = C / NH;
    if (tensor == ATT_STATS) return ((size_t)b * NH + h) * T + t;
    const bool in_qkv = tensor == ATT_Q || tensor == ATT_DQ || is_key(tensor) || is_value(tensor);
    const size_t width = in_qkv ? (NH + 2 * (size_t)KVH) * HS : (size_t)C;
    const size_t part = is_key(tensor) ? NH * HS : is_value(tensor) ? (NH + (size_t)KVH) * HS : 0;
    return ((size_t)b * T + t) * width + part + h * HS + d;
}

static void check_layouts(int B, int T, int C, int NH, int KVH) {
    const int HS = C / NH;
    for (int tensor = ATT_Q; tensor <= ATT_DV; tensor++) {
        int64_t dims[4], strides[4];
        size_t column = 0;
        int ok = cudnn_attention_layout(B, T, C, NH, KVH, tensor, dims, strides, &column);
        const int heads = is_key(tensor) || is_value(tensor) ? KVH : NH;
        const int64_t want_last = tensor == ATT_STATS ? 1 : HS;
        ok = ok && dims[0] == B && dims[1] == heads && dims[2] == T && dims[3] == want_last;
        for (int i = 0; ok && i < 64; i++) {
            const int b = (i * 7) % B, h = (i * 5 + 1) % heads, t = (i * 37 + 3) % T,
                      d = tensor == ATT_STATS ? 0 : (i * 11 + 2) % HS;
            const size_t at = column + b * strides[0] + h * strides[1] + t * strides[2] + d * strides[3];
            ok = at == layout_offset(tensor, T, C, NH, KVH, b, h, t, d);
        }
        expect(ok, "tensor %d (B %d T %d C %d NH %d KVH %d): dims, strides and column match the layout",
               tensor, B, T, C, NH, KVH);
    }
}

int main(void) {
    const int sm_versions[] = {90, 100};
    char why[256];
    unsigned major = 0, minor = 0, patch = 0;
    sscanf(cudnn_attention_version(), "%u.%u.%u", &major, &minor, &patch);
    const bool blackwell_deterministic = major * 10000 + minor * 100 + patch >= 91800;
    for (int sm : sm_versions) {
        for (int i = 0; i < NUM_MODEL_PRESETS; i++) {
            const ModelPreset *p = &MODEL_PRESETS[i];
            const int B = p->max_seq_len >= 2048 ? 1 : 4;
            // as GPT-2 (KVH = NH) and as Llama (the preset's key/value heads), where the preset has that arch
            const int kv_heads[2] = {p->arch != ARCH_LLAMA ? p->num_heads : 0,
                                     p->arch != ARCH_GPT2 ? p->num_kv_heads : 0};
            for (int KVH : kv_heads) {
                if (!KVH) continue;
                int ok = cudnn_attention_validate(B, p->max_seq_len, p->channels, p->num_heads, KVH, sm, why,
                                                  sizeof why);
                if (sm == 100 && !blackwell_deterministic)
                    expect(!ok && strstr(why, "9.18"), "sm_100 %s before cuDNN 9.18 refused: %s", p->name,
                           ok ? "accepted" : why);
                else
                    expect(ok, "sm_%d %s (T %d, %d heads of %d, %d key/value heads): %s", sm, p->name,
                           p->max_seq_len, p->num_heads, p->channels / p->num_heads, KVH, ok ? "" : why);
            }
        }
        // test/test_gpu.sh's models: head size 32 at T 64 (GPT-2's 4 heads; Llama's 4 over 2 key/value
        // heads), head size 32 at T 32 with three heads
        const bool want = sm != 100 || blackwell_deterministic;
        expect(cudnn_attention_validate(8, 64, 128, 4, 4, sm, why, sizeof why) == want,
               "sm_%d the test model: %s", sm, why);
        expect(cudnn_attention_validate(8, 64, 128, 4, 2, sm, why, sizeof why) == want,
               "sm_%d the Llama test model: %s", sm, why);
        expect(cudnn_attention_validate(2, 32, 96, 3, 3, sm, why, sizeof why) == want,
               "sm_%d the C = 96 model: %s", sm, why);
    }
    check_layouts(3, 40, 192, 2, 2);
    check_layouts(2, 64, 768, 12, 12);
    check_layouts(8, 64, 128, 4, 2);     // the Llama test model
    check_layouts(2, 96, 1024, 8, 1);    // one key/value head (multi-query)
    check_layouts(1, 4096, 8192, 64, 8); // llama2-70B
    // grouped-query heads need NH a multiple of KVH (cudnn-frontend's rule, as our exact kernels')
    int ok = cudnn_attention_validate(2, 64, 384, 6, 4, 90, why, sizeof why);
    expect(!ok && strstr(why, "group-query"), "6 query heads over 4 key/value heads refused: %s",
           ok ? "accepted" : why);
    ok = cudnn_attention_validate(2, 128, 1024, 2, 2, 90, why, sizeof why);
    expect(!ok && strstr(why, "256"), "sm_90 head size 512 refused with cuDNN's reason: %s",
           ok ? "accepted" : why);
    printf("cuDNN %s%s\n", cudnn_attention_version(),
           blackwell_deterministic ? ""
                                   : ": no deterministic backward on Blackwell, every sm_100 graph refused");
    return test_summary();
}
