/*
 * replay.c - runs a fuzz target's committed corpus through the same entry
 * function, as a plain program: the corpus becomes a regression test in
 * every build (gcc included), not only in a libFuzzer build.
 *
 * Usage: replay_<target> DIR|FILE...  Fails when no input was found, so a
 * lost corpus cannot pass unnoticed. A failing input aborts (fz_fail) or
 * trips a sanitizer, which fails the test.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nb;
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        if (k == 0)
            break;
        len += k;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of a directory, in byte order of the names (runs are
 * repeatable whatever the locale). */
static int run_dir(const char *dir, unsigned *count)
{
    struct dirent **list;
    int n = scandir(dir, &list, NULL, NULL);
    if (n < 0) {
        perror(dir);
        return -1;
    }
    char **paths = calloc((size_t)n + 1, sizeof(*paths));
    int np = 0;
    for (int i = 0; i < n; i++) {
        if (list[i]->d_name[0] != '.' && paths) {
            size_t l = strlen(dir) + strlen(list[i]->d_name) + 2;
            paths[np] = malloc(l);
            if (paths[np])
                snprintf(paths[np++], l, "%s/%s", dir, list[i]->d_name);
        }
        free(list[i]);
    }
    free(list);
    if (!paths)
        return -1;
    qsort(paths, (size_t)np, sizeof(*paths), cmp);
    int rc = 0;
    for (int i = 0; i < np; i++) {
        struct stat st;
        if (stat(paths[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(paths[i]) != 0)
                rc = -1;
            else
                (*count)++;
        }
        free(paths[i]);
    }
    free(paths);
    return rc;
}

int main(int argc, char **argv)
{
    unsigned count = 0;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            rc = -1;
        } else if (S_ISDIR(st.st_mode)) {
            rc |= run_dir(argv[i], &count);
        } else if (run_file(argv[i]) == 0) {
            count++;
        } else {
            rc = -1;
        }
    }
    printf("replayed %u inputs\n", count);
    if (count == 0) {
        fprintf(stderr, "no corpus input found\n");
        return 1;
    }
    return rc ? 1 : 0;
}
