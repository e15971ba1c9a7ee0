/* A server's wall clock, run a fixed offset from the host's.
 *
 * Preloaded (LD_PRELOAD) into a private server by tenure's tests
 * (test-support/src/offset_clock.rs); the offset, in microseconds, is read
 * from TENURE_CLOCK_OFFSET_MICROS. Only the wall clock moves
 * (CLOCK_REALTIME and its coarse variant, gettimeofday, time): the
 * monotonic clocks a server times itself with are left alone. The host's
 * time is read by system call, never through the functions overridden
 * here, and nothing allocates: redis-server's allocator reads the clock
 * before any library is initialised. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_micros(void) {
  static volatile int read_once;
  static volatile long long offset;
  if (!read_once) {
    const char *text = getenv("TENURE_CLOCK_OFFSET_MICROS");
    offset = text ? strtoll(text, NULL, 10) : 0;
    read_once = 1;
  }
  return offset;
}

static int offset_realtime(clockid_t clock, struct timespec *now) {
  if (syscall(SYS_clock_gettime, clock, now) != 0) return -1;
  long long offset = offset_micros();
  long long nanos = (long long)now->tv_nsec + (offset % 1000000) * 1000;
  long long seconds = (long long)now->tv_sec + offset / 1000000;
  while (nanos < 0) { nanos += 1000000000; seconds -= 1; }
  while (nanos >= 1000000000) { nanos -= 1000000000; seconds += 1; }
  now->tv_sec = (time_t)seconds;
  now->tv_nsec = (long)nanos;
  return 0;
}

int clock_gettime(clockid_t clock, struct timespec *now) {
  if (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE) {
    return offset_realtime(clock, now);
  }
  return (int)syscall(SYS_clock_gettime, clock, now);
}

int gettimeofday(struct timeval *restrict now, void *restrict zone) {
  (void)zone;
  struct timespec precise;
  if (offset_realtime(CLOCK_REALTIME, &precise) != 0) return -1;
  now->tv_sec = precise.tv_sec;
  now->tv_usec = precise.tv_nsec / 1000;
  return 0;
}

time_t time(time_t *now) {
  struct timespec precise;
  if (offset_realtime(CLOCK_REALTIME, &precise) != 0) return (time_t)-1;
  if (now) *now = precise.tv_sec;
  return precise.tv_sec;
}
