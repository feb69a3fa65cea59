/* A named function of the tests' call chains: it keeps locals on its stack
 * (so that a walk without frame pointers must follow its unwind table) and
 * calls the next. */
#define LEVEL(name, next)                                                                  \
    __attribute__((noinline)) void name(long n) {                                           \
        long pad[4] = {n, n + 1, n + 2, n + 3};                                            \
        sink += pad[n & 3];                                                                \
        next(n + 1);                                                                       \
        sink -= pad[(n + 1) & 3];                                                          \
    }
