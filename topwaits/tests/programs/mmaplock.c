/* Contention on a process's mmap_lock: four threads (tw_faulter) touch fresh
 * pages of a region they unmap and map again, each page fault taking the lock
 * to read, while one thread (tw_mapper) maps and unmaps regions in a loop,
 * taking it to write. Prints "ready" once all run. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#define REGION (4 << 20)

static void *faulter(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "tw_faulter");
    for (;;) {
        char *p = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            continue;
        for (long i = 0; i < REGION; i += 4096)
            p[i] = 1;
        munmap(p, REGION);
    }
    return NULL;
}

static void *mapper(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "tw_mapper");
    for (;;) {
        void *p = mmap(NULL, 1 << 16, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED)
            munmap(p, 1 << 16);
    }
    return NULL;
}

int main(void) {
    pthread_t t;
    for (int i = 0; i < 4; i++)
        pthread_create(&t, NULL, faulter, NULL);
    pthread_create(&t, NULL, mapper, NULL);
    printf("ready\n");
    fflush(stdout);
    pause();
    return 0;
}
