/* The one-at-a-time sweeps of planner/policy/sweep.py (sweep_fcfs, sweep_ebf), step for step, for the probes of
   Algorithm 1 where they are the hot path (planner/runtime/native.py builds and loads this). Same IEEE doubles,
   same comparisons in the same order, so the same finish times and the same stop: the Python loops stay the
   reference, and tests/unit/planner/test_native_sweep.py holds the two to each other. */
#include <math.h>

/* heapq.heapreplace on a min-heap of doubles: only the minimum is ever read, so any valid heap order gives
   the same values as Python's */
static void replace_min(double *heap, long n, double value) {
    long i = 0;
    for (;;) {
        long child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && heap[child + 1] < heap[child]) child++;
        if (heap[child] >= value) break;
        heap[i] = heap[child];
        i = child;
    }
    heap[i] = value;
}

static void push_rank(long *heap, long *n, long rank) {
    long i = (*n)++;
    while (i > 0) {
        long parent = (i - 1) / 2;
        if (heap[parent] <= rank) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = rank;
}

static void pop_rank(long *heap, long *n) {
    long last = heap[--(*n)], i = 0;
    for (;;) {
        long child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && heap[child + 1] < heap[child]) child++;
        if (heap[child] >= last) break;
        heap[i] = heap[child];
        i = child;
    }
    if (*n > 0) heap[i] = last;
}

/* FCFS from the first request; returns the first request that starts after its cut, or -1 */
long sweep_fcfs(long n, const double *arr, const double *srv, const double *cut, double *free_, long workers,
                double *fin) {
    for (long i = 0; i < n; i++) {
        double a = arr[i], w = free_[0];
        double t = a >= w ? a : w;
        double f = t + srv[i];
        replace_min(free_, workers, f);
        fin[i] = f;
        if (t > cut[i]) return i;
    }
    return -1;
}

/* EBF from the first request; `arr` holds n + 1 values (an inf sentinel). Scratch: `head` and `tail` of each
   rank's FIFO (groups each), `next` (n), `urgent` (groups). */
long sweep_ebf(long n, const double *arr, const double *srv, const long *grp, long groups, const double *cut,
               double *free_, long workers, double *fin, long *head, long *tail, long *next, long *urgent) {
    long i = 0, waiting = 0;
    double t = -INFINITY;
    for (long g = 0; g < groups; g++) head[g] = -1;
    while (i < n || waiting) {
        double w = free_[0];
        if (!waiting) {
            double a = arr[i];
            if (a >= w && arr[i + 1] > a) {  /* a free worker and no rival arrival: start now */
                double f = a + srv[i];
                replace_min(free_, workers, f);
                fin[i] = f;
                if (a > cut[i]) return i;
                t = a;
                i++;
                continue;
            }
            t = a > w ? a : w;
        } else if (w > t) {
            t = w;
        }
        while (i < n && arr[i] <= t) {
            long g = grp[i];
            next[i] = -1;
            if (head[g] < 0) {
                push_rank(urgent, &waiting, g);
                head[g] = i;
            } else {
                next[tail[g]] = i;
            }
            tail[g] = i;
            i++;
        }
        long g = urgent[0], p = head[g];
        head[g] = next[p];
        if (head[g] < 0) pop_rank(urgent, &waiting);
        double f = t + srv[p];
        replace_min(free_, workers, f);
        fin[p] = f;
        if (t > cut[p]) return p;
    }
    return -1;
}
