// SPDX-License-Identifier: GPL-2.0-only
// io_uring load for the collector benchmark (issue 30): copies a file
// through io_uring requests only, no read or write syscall.
//   uring_copy SRC DST BLOCK   one read request, then one write request,
//                              per BLOCK bytes; prints ns per request
// Raw io_uring_setup/io_uring_enter (no liburing on the machine): each
// request is submitted and waited for alone, so every one of them passes
// the collector's io_uring tracepoints as a request of its own.
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct ring {
	int fd;
	unsigned *sq_tail, *sq_mask, *sq_array;
	unsigned *cq_head, *cq_tail, *cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
};

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int setup(struct ring *r, unsigned entries)
{
	struct io_uring_params p;
	size_t sq_len, cq_len;
	char *sq, *cq;

	memset(&p, 0, sizeof(p));
	r->fd = syscall(__NR_io_uring_setup, entries, &p);
	if (r->fd < 0)
		return -1;
	sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	if (p.features & IORING_FEAT_SINGLE_MMAP)
		sq_len = cq_len = sq_len > cq_len ? sq_len : cq_len;
	sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
		  IORING_OFF_SQ_RING);
	if (sq == MAP_FAILED)
		return -1;
	cq = sq;
	if (!(p.features & IORING_FEAT_SINGLE_MMAP)) {
		cq = mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
			  IORING_OFF_CQ_RING);
		if (cq == MAP_FAILED)
			return -1;
	}
	r->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
	if (r->sqes == MAP_FAILED)
		return -1;
	r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
	r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
	r->sq_array = (unsigned *)(sq + p.sq_off.array);
	r->cq_head = (unsigned *)(cq + p.cq_off.head);
	r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
	r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
	r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	return 0;
}

/* One request, submitted and waited for; its result (or -1: the ring failed). */
static int run(struct ring *r, int op, int fd, void *buf, unsigned len, unsigned long long off)
{
	unsigned tail = *r->sq_tail, idx = tail & *r->sq_mask, head;
	struct io_uring_sqe *s = &r->sqes[idx];
	int res;

	memset(s, 0, sizeof(*s));
	s->opcode = op;
	s->fd = fd;
	s->addr = (unsigned long)buf;
	s->len = len;
	s->off = off;
	r->sq_array[idx] = idx;
	__atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
	if (syscall(__NR_io_uring_enter, r->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
		return -1;
	head = *r->cq_head;
	if (head == __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE))
		return -1;
	res = r->cqes[head & *r->cq_mask].res;
	__atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
	return res;
}

int main(int argc, char **argv)
{
	unsigned long long off = 0, requests = 0;
	struct ring r;
	long long t0;
	long block;
	int src, dst, n, w;
	char *buf;

	if (argc != 4 || (block = atol(argv[3])) <= 0) {
		fprintf(stderr, "usage: uring_copy SRC DST BLOCK\n");
		return 2;
	}
	src = open(argv[1], O_RDONLY);
	dst = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
	buf = malloc(block);
	if (src < 0 || dst < 0 || !buf || setup(&r, 8)) {
		perror("uring_copy: setup");
		return 1;
	}
	t0 = now_ns();
	for (;;) {
		n = run(&r, IORING_OP_READ, src, buf, block, off);
		requests++;
		if (n < 0) {
			fprintf(stderr, "uring_copy: read: %s\n", strerror(-n));
			return 1;
		}
		if (n == 0)
			break;
		w = run(&r, IORING_OP_WRITE, dst, buf, n, off);
		requests++;
		if (w != n) {
			fprintf(stderr, "uring_copy: write: %d of %d\n", w, n);
			return 1;
		}
		off += n;
	}
	printf("%.1f %llu %llu\n", (double)(now_ns() - t0) / requests, requests, off);
	return 0;
}
