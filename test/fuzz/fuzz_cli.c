// test/fuzz/fuzz_cli.c: the command line (cli.h) and what the trainers derive from it before loading
// anything: the input's NUL-separated words are argv[1..]; parse, validate, the model shape, sequence
// length, the block recipes' shape rule and accumulation, and the --dry_run memory plan (dry_run.h), whose
// report goes to /dev/null.
// --help and a bare command line print and exit by design, so they are not fed.
#include "fuzz.h"

#include "../../core/dry_run.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet = 0;
    if (!quiet) quiet = freopen("/dev/null", "w", stdout) != NULL;
    char *text = (char *)malloc_check(size + 1, "fuzz argv");
    memcpy(text, data, size);
    text[size] = '\0';
    char *argv[66] = {(char *)"train_cpu"};
    int argc = 1;
    for (size_t at = 0; at <= size && argc < 65;) {
        argv[argc++] = text + at;
        at += strlen(text + at) + 1;
    }
    int skip = argc < 2;
    for (int i = 1; i < argc; i++) skip |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
    if (!skip) {
        if (!FUZZ_REFUSED()) {
            TrainOptions opts;
            parse_options(&opts, argc, argv);
            validate_options(&opts);
            if (!*opts.init_from) {
                GPTConfig cfg = config_from_options(&opts);
                int T = resolve_seq_len(&opts, &cfg);
                check_fp8_recipe_shape(&opts, &cfg, opts.batch_size, T);
                resolve_grad_accum_steps(&opts, T, 1);
                if (opts.dry_run)
                    dry_run_report(&opts, &cfg, opts.batch_size, T, opts.world_size ? opts.world_size : 1);
            }
        }
    }
    free(text);
    fuzz_release_held();
    return 0;
}
