/* Forks a child straight into a cgroup with clone3(CLONE_INTO_CGROUP), as
 * systemd starts a unit's processes: the child never runs in its parent's
 * cgroup, so no cgroup_attach_task event moves it. Usage: into_cgroup DIR.
 * Prints "ready", waits for a line on stdin, forks, prints the child's pid;
 * the child sleeps 10 ms a hundred times, the parent waits for it. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: into_cgroup DIR\n");
        return 2;
    }
    int dir = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) {
        perror(argv[1]);
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 1;
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.cgroup = (uint64_t)dir;
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid < 0) {
        perror("clone3");
        return 1;
    }
    if (pid == 0) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        for (int i = 0; i < 100; i++)
            nanosleep(&ts, NULL);
        _exit(0);
    }
    printf("%ld\n", pid);
    fflush(stdout);
    int status;
    waitpid((pid_t)pid, &status, 0);
    return 0;
}
