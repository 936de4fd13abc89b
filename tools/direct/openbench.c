/* openbench.c - time open()+close() of one file, N times: the per-open cost of the direct
 * path's preload library (run with and without LD_PRELOAD; see openbench.sh).
 *
 *   openbench PATH N MODE      MODE: rd (O_RDONLY), rd-direct (O_RDONLY|O_DIRECT),
 *                                    wr-direct (O_WRONLY|O_DIRECT)
 *
 * Prints one line: "ns_per_open <float> fd_target <readlink of the first open's fd>" (the
 * target shows whether the program got the tier file itself, a FUSE path, or the file).
 * 100 untimed opens first. Exit 1 on any failed open.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: openbench PATH N rd|rd-direct|wr-direct\n");
        return 2;
    }
    const char *path = argv[1];
    long n = atol(argv[2]);
    int flags;
    if (!strcmp(argv[3], "rd")) flags = O_RDONLY;
    else if (!strcmp(argv[3], "rd-direct")) flags = O_RDONLY | O_DIRECT;
    else if (!strcmp(argv[3], "wr-direct")) flags = O_WRONLY | O_DIRECT;
    else { fprintf(stderr, "openbench: unknown mode %s\n", argv[3]); return 2; }
    char target[4096] = "?";
    for (int i = 0; i < 100; i++) {
        int fd = open(path, flags);
        if (fd < 0) { perror(path); return 1; }
        if (i == 0) {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t k = readlink(link, target, sizeof target - 1);
            target[k > 0 ? k : 0] = 0;
        }
        close(fd);
    }
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        int fd = open(path, flags);
        if (fd < 0) { perror(path); return 1; }
        close(fd);
    }
    double t1 = now_ns();
    printf("ns_per_open %.0f fd_target %s\n", (t1 - t0) / n, target);
    return 0;
}
