/*
 * fgclock: an LD_PRELOAD library that shifts a process's wall clock by an
 * offset the fault harness changes at run time.
 *
 * The offset (signed 64-bit nanoseconds, native byte order) is read on every
 * call from a file named by FENCEGATE_CLOCK_FILE, mapped shared, so a write
 * to the file takes effect at once. CLOCK_REALTIME, gettimeofday and time are
 * shifted; the monotonic clocks are not.
 *
 * libfaketime does the same in general, but it cannot start a redis-server
 * linked with jemalloc (its dlsym calls malloc, whose initialisation calls
 * clock_gettime, which recurses into libfaketime: libfaketime issue #130).
 * This shim calls the kernel directly and never allocates, so it has no such
 * cycle.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* glibc declares tv nonnull; callers still pass NULL in practice. */
#pragma GCC diagnostic ignored "-Wnonnull-compare"

static volatile int64_t *offset_ns;

__attribute__((constructor)) static void fgclock_init(void) {
	const char *path = getenv("FENCEGATE_CLOCK_FILE");
	if (path == NULL) return;
	int fd = open(path, O_RDONLY);
	if (fd < 0) return;
	void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p != MAP_FAILED) offset_ns = (volatile int64_t *)p;
}

static int64_t offset(void) { return offset_ns ? __atomic_load_n(offset_ns, __ATOMIC_RELAXED) : 0; }

static void shift(struct timespec *ts) {
	int64_t ns = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset();
	ts->tv_sec = ns / 1000000000LL;
	ts->tv_nsec = ns % 1000000000LL;
	if (ts->tv_nsec < 0) { ts->tv_nsec += 1000000000LL; ts->tv_sec--; }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	int rc = (int)syscall(SYS_clock_gettime, id, ts);
	if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
	return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	struct timespec ts;
	int rc = clock_gettime(CLOCK_REALTIME, &ts);
	if (rc != 0) return rc;
	if (tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
	if (tz) { struct timezone *z = tz; z->tz_minuteswest = 0; z->tz_dsttime = 0; }
	return 0;
}

time_t time(time_t *out) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (out) *out = ts.tv_sec;
	return ts.tv_sec;
}
