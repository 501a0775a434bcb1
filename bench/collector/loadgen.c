// SPDX-License-Identifier: GPL-2.0-only
// Syscall load for the collector benchmark.
//   loadgen openclose N            N x (openat + close) on /dev/null; prints ns per iteration
//   loadgen getpid N               N x getpid (a syscall the collector does not trace); prints ns per call
//   loadgen read RATE SECONDS      read(2) of 1 byte from /dev/zero at RATE calls/s; prints calls done
//   loadgen read 0 SECONDS         as fast as possible
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "openclose")) {
		long n = atol(argv[2]);
		long long t0 = now_ns();
		for (long i = 0; i < n; i++) {
			int fd = openat(AT_FDCWD, "/dev/null", O_RDONLY);
			if (fd < 0) { perror("openat"); return 1; }
			close(fd);
		}
		printf("%.1f\n", (double)(now_ns() - t0) / n);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "getpid")) {
		long n = atol(argv[2]);
		long long t0 = now_ns();
		/* syscall(2), not getpid(3): the C library may answer from a cache. */
		for (long i = 0; i < n; i++)
			syscall(SYS_getpid);
		printf("%.1f\n", (double)(now_ns() - t0) / n);
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "read")) {
		double rate = atof(argv[2]);
		long long dur = (long long)(atof(argv[3]) * 1e9);
		int fd = open("/dev/zero", O_RDONLY);
		char c;
		long calls = 0;
		long long t0 = now_ns(), t;
		/* Batches of 64 calls, paced against the clock: the offered rate
		 * stays exact on average without a timer per call. */
		while ((t = now_ns()) - t0 < dur) {
			if (rate > 0) {
				double due = (double)(t - t0) * rate / 1e9;
				if (calls >= due) {
					struct timespec ts = { 0, 20000 };
					nanosleep(&ts, NULL);
					continue;
				}
			}
			for (int i = 0; i < 64; i++)
				if (read(fd, &c, 1) != 1) { perror("read"); return 1; }
			calls += 64;
		}
		printf("%ld\n", calls);
		return 0;
	}
	fprintf(stderr, "usage: loadgen openclose N | loadgen getpid N | loadgen read RATE SECONDS\n");
	return 2;
}
