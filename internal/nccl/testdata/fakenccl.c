// fakenccl.c is a stand-in for libnccl.so.2 that the tests of package nccl
// build with the C compiler and open through NCCL_LIBRARY-style paths. It
// touches no GPU: collectives write a record of their arguments into recv,
// which the tests point at host memory, so that each argument's value and
// position can be checked.
//
// Build: cc -shared -fPIC -DFAKE_VERSION=22803 [-DOMIT_BROADCAST] -o lib.so fakenccl.c
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int cgaClusterSize;
	int minCTAs;
	int maxCTAs;
	const char *netName;
	int splitShare;
} config;

typedef struct {
	int nranks, rank, blocking, cga, minCTAs, maxCTAs, polls;
} fake_comm;

static const char *last = "";

ncclResult_t ncclGetVersion(int *v) { *v = FAKE_VERSION; return 0; }

const char *ncclGetErrorString(ncclResult_t r) {
	static const char *texts[] = {"no error", "cuda", "system", "internal", "invalid argument",
	                              "invalid usage", "remote", "in progress"};
	return r >= 0 && r < 8 ? texts[r] : "unknown";
}

const char *ncclGetLastError(void *comm) { return last; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
	for (int i = 0; i < 128; i++) id->internal[i] = (char)(i ^ 0x5a);
	return 0;
}

// ncclCommInitRankConfig checks the id and the config header; a
// non-blocking communicator reports ncclInProgress for two polls.
ncclResult_t ncclCommInitRankConfig(void **comm, int nranks, ncclUniqueId id, int rank, config *c) {
	*comm = 0;
	for (int i = 0; i < 128; i++) {
		if (id.internal[i] != (char)(i ^ 0x5a)) { last = "fake: unique id mangled"; return 4; }
	}
	if (c->size != sizeof(config) || c->magic != 0xcafebeef || c->version != 21800 ||
	    c->splitShare != INT_MIN) {
		last = "fake: config header";
		return 4;
	}
	if (c->netName != 0 && strcmp(c->netName, "Socket") != 0) { last = "fake: net name"; return 4; }
	fake_comm *f = calloc(1, sizeof(fake_comm));
	f->nranks = nranks; f->rank = rank; f->blocking = c->blocking;
	f->cga = c->cgaClusterSize; f->minCTAs = c->minCTAs; f->maxCTAs = c->maxCTAs;
	*comm = f;
	if (!c->blocking) { f->polls = 2; return 7; }
	return 0;
}

ncclResult_t ncclCommGetAsyncError(void *comm, ncclResult_t *state) {
	fake_comm *f = comm;
	*state = f->polls > 0 ? 7 : 0;
	if (f->polls > 0) f->polls--;
	return 0;
}

ncclResult_t ncclCommCount(void *comm, int *n) { *n = ((fake_comm *)comm)->nranks; return 0; }
ncclResult_t ncclCommUserRank(void *comm, int *n) { *n = ((fake_comm *)comm)->rank; return 0; }

// ncclCommCuDevice reports the config fields it was given: the number of
// them left undefined (INT_MIN), plus 10*maxCTAs when maxCTAs is set.
ncclResult_t ncclCommCuDevice(void *comm, int *n) {
	fake_comm *f = comm;
	*n = (f->cga == INT_MIN) + (f->minCTAs == INT_MIN) + (f->maxCTAs == INT_MIN);
	if (f->maxCTAs != INT_MIN) *n += 10 * f->maxCTAs;
	return 0;
}

ncclResult_t ncclCommFinalize(void *comm) { return 0; }
ncclResult_t ncclCommDestroy(void *comm) { free(comm); return 0; }
ncclResult_t ncclCommAbort(void *comm) { free(comm); return 0; }
ncclResult_t ncclGroupStart(void) { return 0; }
ncclResult_t ncclGroupEnd(void) { return 0; }

// record writes the arguments of a collective into recv; a count of 13
// fails with ncclRemoteError.
static ncclResult_t record(uint64_t kind, const void *s, void *d, size_t n, int dt, int op, int root,
                           void *comm, void *stream) {
	if (n == 13) { last = "fake: peer vanished"; return 6; }
	uint64_t *r = d;
	r[0] = kind; r[1] = (uint64_t)(uintptr_t)s; r[2] = (uint64_t)(uintptr_t)d; r[3] = n;
	r[4] = (uint64_t)dt; r[5] = (uint64_t)op; r[6] = (uint64_t)root;
	r[7] = (uint64_t)((fake_comm *)comm)->rank; r[8] = (uint64_t)(uintptr_t)stream;
	return 0;
}

ncclResult_t ncclAllGather(const void *s, void *d, size_t n, int dt, void *comm, void *st) {
	return record(1, s, d, n, dt, -1, -1, comm, st);
}
ncclResult_t ncclReduceScatter(const void *s, void *d, size_t n, int dt, int op, void *comm, void *st) {
	return record(2, s, d, n, dt, op, -1, comm, st);
}
ncclResult_t ncclAllReduce(const void *s, void *d, size_t n, int dt, int op, void *comm, void *st) {
	return record(3, s, d, n, dt, op, -1, comm, st);
}
// Send and Recv record into their one buffer.
ncclResult_t ncclSend(const void *s, size_t n, int dt, int peer, void *comm, void *st) {
	return record(5, s, (void *)s, n, dt, -1, peer, comm, st);
}
ncclResult_t ncclRecv(void *d, size_t n, int dt, int peer, void *comm, void *st) {
	return record(6, d, d, n, dt, -1, peer, comm, st);
}
#ifndef OMIT_BROADCAST
ncclResult_t ncclBroadcast(const void *s, void *d, size_t n, int dt, int root, void *comm, void *st) {
	return record(4, s, d, n, dt, -1, root, comm, st);
}
#endif
