/*
 * A fake libnvidia-ml.so.1 for gpusched-agent tests: only the NVML symbols the agent calls,
 * describing a fixed machine of 8 "NVIDIA H100 80GB HBM3" cards:
 *
 *   index i: UUID GPU-5a1e0000-0000-4000-8000-00000000000<i>, PCI 00000000:<(i+1)*16 hex>:00.0,
 *            minor number i, 80 GiB, CPU affinity 0-31 (cards 0-3) or 32-63 (cards 4-7),
 *            NVLink: cards (0,1) (2,3) (4,5) (6,7) joined by 4 lanes (links 0-3),
 *            PCIe topology: partner SINGLE, same half HOSTBRIDGE, other half SYSTEM.
 *
 * The state file changes the machine; it is read again on every call: the file named by
 * FAKE_NVML_STATE, else "fake-nvml.state" next to this library (so tests in one process can
 * each load their own copy). One directive per line ('#' starts a comment):
 *
 *   cards N            number of cards (0..8, default 8)
 *   lost I             card I fell off the bus: every query on it returns GPU_IS_LOST
 *   xid I CODE         deliver one XID critical error event CODE for card I (once per line)
 *   pending_retire I   card I has pages pending retirement
 *   retired I N        card I has N retired pages (double-bit ECC)
 *   mig I              card I has MIG mode enabled (an H100 80GB profile table, or H200 141GB)
 *   h200 I             card I is an "NVIDIA H200 141GB HBM3e" (143771 MiB, the H200 table)
 *   gi I P S           card I has a GPU instance of NVML profile index P (0 = 1g, 1 = 2g,
 *                      2 = 3g, 3 = 4g, 4 = 7g, 7 = 1g+me, 9 = 1g double memory) at start S
 *   mig_error I CALL CODE   the MIG call CALL (profile | placements | instances | info) on
 *                      card I fails with CODE (not_supported | no_permission | unknown)
 *   error I            reading card I's name fails with NVML_ERROR_UNKNOWN (a read error)
 *   no_topology        topology and NVLink queries return NOT_SUPPORTED
 *   no_events          event sets are NOT_SUPPORTED
 *   init_fails         nvmlInit_v2 returns DRIVER_NOT_LOADED
 *
 * MIG tables (nvmlDeviceGetGpuInstanceProfileInfoV, ...PossiblePlacements_v2,
 * nvmlDeviceGetGpuInstances, nvmlGpuInstanceGetInfo): the profiles NVML reports on an H100
 * 80GB HBM3 and an H200 141GB HBM3e (ids, slices, SMs, memory, names, placements of 8 memory
 * slices); every other profile index is NOT_SUPPORTED, as is any MIG query on a card without
 * MIG mode. GPU instance ids count from 1 in the order of the gi lines.
 *
 * Built by the test suite with: cc -shared -fPIC -o libnvidia-ml.so.1 fake_nvml.c -lpthread -ldl
 * With -DFAKE_MINIMAL only the identity symbols exist (init, count, handle, UUID, name, memory):
 * an old or partial driver, where every optional function is a missing symbol.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CARDS 8
#define MAX_LINKS 18

enum {
    SUCCESS = 0,
    ERROR_UNINITIALIZED = 1,
    ERROR_INVALID_ARGUMENT = 2,
    ERROR_NOT_SUPPORTED = 3,
    ERROR_INSUFFICIENT_SIZE = 7,
    ERROR_DRIVER_NOT_LOADED = 9,
    ERROR_TIMEOUT = 10,
    ERROR_NO_PERMISSION = 4,
    ERROR_GPU_IS_LOST = 15,
    ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    ERROR_UNKNOWN = 999,
};

#define MAX_GIS 16
#define PROFILE_COUNT 17
enum { CALL_PROFILE, CALL_PLACEMENTS, CALL_INSTANCES, CALL_INFO, CALLS };

typedef struct fake_device {
    unsigned int index;
} fake_device;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvml_pci_info;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvml_memory_v2;

typedef struct {
    fake_device *device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvml_event_data;

typedef struct fake_event_set {
    unsigned long long registered[MAX_CARDS];
    int delivered[MAX_CARDS];
} fake_event_set;

typedef struct {
    int cards;
    int lost[MAX_CARDS];
    int pending_retire[MAX_CARDS];
    unsigned int retired[MAX_CARDS];
    int mig[MAX_CARDS];
    int error[MAX_CARDS];
    int xid_count[MAX_CARDS];
    unsigned long long xid_codes[MAX_CARDS][64];
    int no_topology;
    int no_events;
    int init_fails;
    int h200[MAX_CARDS];
    int gi_count[MAX_CARDS];
    unsigned int gi_profile[MAX_CARDS][MAX_GIS];
    unsigned int gi_start[MAX_CARDS][MAX_GIS];
    int mig_error[MAX_CARDS][CALLS];
} fake_state;

typedef struct {
    int present;
    unsigned int id;
    unsigned int slices;
    unsigned int instances;
    unsigned int sms;
    unsigned long long mem;
    const char *name;
    unsigned int size;
    unsigned int starts_count;
    unsigned int starts[8];
} fake_profile;

#define ONES 7, {0, 1, 2, 3, 4, 5, 6}
static const fake_profile H100_PROFILES[PROFILE_COUNT] __attribute__((unused)) = {
    [0] = {1, 19, 1, 7, 16, 9984, "MIG 1g.10gb", 1, ONES},
    [1] = {1, 14, 2, 3, 32, 20096, "MIG 2g.20gb", 2, 3, {0, 2, 4}},
    [2] = {1, 9, 3, 2, 60, 40448, "MIG 3g.40gb", 4, 2, {0, 4}},
    [3] = {1, 5, 4, 1, 64, 40448, "MIG 4g.40gb", 4, 1, {0}},
    [4] = {1, 0, 7, 1, 132, 81152, "MIG 7g.80gb", 8, 1, {0}},
    [7] = {1, 20, 1, 1, 16, 9984, "MIG 1g.10gb+me", 1, ONES},
    [9] = {1, 15, 1, 4, 26, 20096, "MIG 1g.20gb", 2, 4, {0, 2, 4, 6}},
};
static const fake_profile H200_PROFILES[PROFILE_COUNT] __attribute__((unused)) = {
    [0] = {1, 19, 1, 7, 16, 16384, "MIG 1g.18gb", 1, ONES},
    [1] = {1, 14, 2, 3, 32, 33024, "MIG 2g.35gb", 2, 3, {0, 2, 4}},
    [2] = {1, 9, 3, 2, 60, 71168, "MIG 3g.71gb", 4, 2, {0, 4}},
    [3] = {1, 5, 4, 1, 64, 71168, "MIG 4g.71gb", 4, 1, {0}},
    [4] = {1, 0, 7, 1, 132, 143104, "MIG 7g.141gb", 8, 1, {0}},
    [7] = {1, 20, 1, 1, 16, 16384, "MIG 1g.18gb+me", 1, ONES},
    [9] = {1, 15, 1, 4, 26, 33024, "MIG 1g.35gb", 2, 4, {0, 2, 4, 6}},
};

typedef struct {
    unsigned int start;
    unsigned int size;
} nvml_placement;

typedef struct {
    unsigned int version;
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} nvml_gi_profile_info_v2;

typedef struct fake_gi {
    unsigned int card;
    int slot;
} fake_gi;

typedef struct {
    fake_device *device;
    unsigned int id;
    unsigned int profileId;
    nvml_placement placement;
} nvml_gi_info;

static fake_gi gi_handles[MAX_CARDS][MAX_GIS] __attribute__((unused));

static int error_code(const char *word) {
    if (strcmp(word, "not_supported") == 0) return ERROR_NOT_SUPPORTED;
    if (strcmp(word, "no_permission") == 0) return ERROR_NO_PERMISSION;
    if (strcmp(word, "unknown") == 0) return ERROR_UNKNOWN;
    return 0;
}

static int call_of(const char *word) {
    if (strcmp(word, "profile") == 0) return CALL_PROFILE;
    if (strcmp(word, "placements") == 0) return CALL_PLACEMENTS;
    if (strcmp(word, "instances") == 0) return CALL_INSTANCES;
    if (strcmp(word, "info") == 0) return CALL_INFO;
    return -1;
}

static fake_device devices[MAX_CARDS] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static pthread_mutex_t lock __attribute__((unused)) = PTHREAD_MUTEX_INITIALIZER;
static int initialized = 0;

static int valid_index(int i) { return i >= 0 && i < MAX_CARDS; }

static void read_state(fake_state *s) {
    memset(s, 0, sizeof *s);
    s->cards = MAX_CARDS;
    char own[4096];
    const char *path = getenv("FAKE_NVML_STATE");
    if (path == NULL || path[0] == '\0') {
        Dl_info info;
        if (dladdr((void *)&read_state, &info) == 0 || info.dli_fname == NULL) return;
        snprintf(own, sizeof own, "%s", info.dli_fname);
        char *slash = strrchr(own, '/');
        if (slash == NULL) return;
        snprintf(slash + 1, sizeof own - (size_t)(slash + 1 - own), "fake-nvml.state");
        path = own;
    }
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    char line[256];
    while (fgets(line, sizeof line, f) != NULL) {
        char word[32] = {0};
        int a = -1;
        unsigned long long b = 0;
        char *hash = strchr(line, '#');
        if (hash != NULL) *hash = '\0';
        int n = sscanf(line, "%31s %d %llu", word, &a, &b);
        if (n < 1) continue;
        if (strcmp(word, "cards") == 0 && n >= 2 && a >= 0 && a <= MAX_CARDS) s->cards = a;
        else if (strcmp(word, "lost") == 0 && n >= 2 && valid_index(a)) s->lost[a] = 1;
        else if (strcmp(word, "pending_retire") == 0 && n >= 2 && valid_index(a)) s->pending_retire[a] = 1;
        else if (strcmp(word, "retired") == 0 && n >= 3 && valid_index(a)) s->retired[a] = (unsigned int)b;
        else if (strcmp(word, "mig") == 0 && n >= 2 && valid_index(a)) s->mig[a] = 1;
        else if (strcmp(word, "error") == 0 && n >= 2 && valid_index(a)) s->error[a] = 1;
        else if (strcmp(word, "xid") == 0 && n >= 3 && valid_index(a) && s->xid_count[a] < 64)
            s->xid_codes[a][s->xid_count[a]++] = b;
        else if (strcmp(word, "h200") == 0 && n >= 2 && valid_index(a)) s->h200[a] = 1;
        else if (strcmp(word, "gi") == 0) {
            unsigned int prof = 0, start = 0;
            if (sscanf(line, "%31s %d %u %u", word, &a, &prof, &start) == 4 && valid_index(a) &&
                s->gi_count[a] < MAX_GIS) {
                s->gi_profile[a][s->gi_count[a]] = prof;
                s->gi_start[a][s->gi_count[a]] = start;
                s->gi_count[a]++;
            }
        } else if (strcmp(word, "mig_error") == 0) {
            char call[32] = {0}, code[32] = {0};
            if (sscanf(line, "%31s %d %31s %31s", word, &a, call, code) == 4 && valid_index(a) &&
                call_of(call) >= 0)
                s->mig_error[a][call_of(call)] = error_code(code);
        }
        else if (strcmp(word, "no_topology") == 0) s->no_topology = 1;
        else if (strcmp(word, "no_events") == 0) s->no_events = 1;
        else if (strcmp(word, "init_fails") == 0) s->init_fails = 1;
    }
    fclose(f);
}

/* Checks a handle against the current state: SUCCESS, INVALID_ARGUMENT or GPU_IS_LOST. */
static int check(fake_device *d, fake_state *s) {
    if (!initialized) return ERROR_UNINITIALIZED;
    if (d == NULL || d < devices || d >= devices + MAX_CARDS) return ERROR_INVALID_ARGUMENT;
    if ((int)d->index >= s->cards) return ERROR_INVALID_ARGUMENT;
    if (s->lost[d->index]) return ERROR_GPU_IS_LOST;
    return SUCCESS;
}

static int copy_string(char *dst, unsigned int len, const char *src) {
    if (dst == NULL) return ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return SUCCESS;
}

__attribute__((unused)) static void pci_of(unsigned int index, nvml_pci_info *p) {
    memset(p, 0, sizeof *p);
    p->domain = 0;
    p->bus = (index + 1) * 16;
    p->device = 0;
    p->pciDeviceId = 0x233010de;
    p->pciSubSystemId = 0x16c110de;
    snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", p->bus);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", p->bus);
}

int nvmlInit_v2(void) {
    fake_state s;
    read_state(&s);
    if (s.init_fails) return ERROR_DRIVER_NOT_LOADED;
    initialized = 1;
    return SUCCESS;
}

int nvmlShutdown(void) {
    initialized = 0;
    return SUCCESS;
}

const char *nvmlErrorString(int result) {
    (void)result;
    return "fake NVML error";
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    return copy_string(version, length, "550.54.15");
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
    fake_state s;
    read_state(&s);
    if (!initialized) return ERROR_UNINITIALIZED;
    if (count == NULL) return ERROR_INVALID_ARGUMENT;
    *count = (unsigned int)s.cards;
    return SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, fake_device **device) {
    fake_state s;
    read_state(&s);
    if (!initialized) return ERROR_UNINITIALIZED;
    if (device == NULL || (int)index >= s.cards) return ERROR_INVALID_ARGUMENT;
    if (s.lost[index]) return ERROR_GPU_IS_LOST;
    *device = &devices[index];
    return SUCCESS;
}

#ifndef FAKE_MINIMAL
int nvmlDeviceGetIndex(fake_device *d, unsigned int *index) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    *index = d->index;
    return SUCCESS;
}

int nvmlDeviceGetMinorNumber(fake_device *d, unsigned int *minor) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    *minor = d->index;
    return SUCCESS;
}

#endif

int nvmlDeviceGetUUID(fake_device *d, char *uuid, unsigned int length) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    char buf[96];
    snprintf(buf, sizeof buf, "GPU-5a1e0000-0000-4000-8000-00000000000%u", d->index);
    return copy_string(uuid, length, buf);
}

int nvmlDeviceGetName(fake_device *d, char *name, unsigned int length) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    if (s.error[d->index]) return ERROR_UNKNOWN;
    return copy_string(name, length, s.h200[d->index] ? "NVIDIA H200 141GB HBM3e" : "NVIDIA H100 80GB HBM3");
}

int nvmlDeviceGetMemoryInfo_v2(fake_device *d, nvml_memory_v2 *memory) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    if (memory == NULL) return ERROR_INVALID_ARGUMENT;
    memory->total = s.h200[d->index] ? 143771ULL << 20 : 80ULL << 30;
    memory->reserved = 512ULL << 20;
    memory->used = 0;
    memory->free = memory->total - memory->reserved;
    return SUCCESS;
}

#ifndef FAKE_MINIMAL
int nvmlDeviceGetPciInfo_v3(fake_device *d, nvml_pci_info *pci) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    if (pci == NULL) return ERROR_INVALID_ARGUMENT;
    pci_of(d->index, pci);
    return SUCCESS;
}

int nvmlDeviceGetCpuAffinity(fake_device *d, unsigned int size, unsigned long *set) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    if (set == NULL || size == 0) return ERROR_INVALID_ARGUMENT;
    memset(set, 0, size * sizeof(unsigned long));
    /* CPUs 0-31 for cards 0-3, 32-63 for cards 4-7 (64-bit unsigned long). */
    set[0] = d->index < 4 ? 0x00000000FFFFFFFFUL : 0xFFFFFFFF00000000UL;
    return SUCCESS;
}

int nvmlDeviceGetMigMode(fake_device *d, unsigned int *current, unsigned int *pending) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    *current = (unsigned int)s.mig[d->index];
    *pending = (unsigned int)s.mig[d->index];
    return SUCCESS;
}

static const fake_profile *table(fake_state *s, unsigned int card) {
    return s->h200[card] ? H200_PROFILES : H100_PROFILES;
}

/* The profile with NVML profile id `id` on card `card`, or NULL. */
static const fake_profile *profile_by_id(fake_state *s, unsigned int card, unsigned int id) {
    const fake_profile *t = table(s, card);
    for (int i = 0; i < PROFILE_COUNT; i++)
        if (t[i].present && t[i].id == id) return &t[i];
    return NULL;
}

/* Common checks of a MIG query on `d`: handle, MIG mode, injected error of `call`. */
static int mig_check(fake_device *d, fake_state *s, int call) {
    int rc = check(d, s);
    if (rc != SUCCESS) return rc;
    if (s->mig_error[d->index][call]) return s->mig_error[d->index][call];
    if (!s->mig[d->index]) return ERROR_NOT_SUPPORTED;
    return SUCCESS;
}

int nvmlDeviceGetGpuInstanceProfileInfoV(fake_device *d, unsigned int profile, nvml_gi_profile_info_v2 *info) {
    fake_state s;
    read_state(&s);
    int rc = mig_check(d, &s, CALL_PROFILE);
    if (rc != SUCCESS) return rc;
    if (info == NULL) return ERROR_INVALID_ARGUMENT;
    if (info->version != ((unsigned int)sizeof *info | (2U << 24))) return ERROR_ARGUMENT_VERSION_MISMATCH;
    if (profile >= PROFILE_COUNT) return ERROR_INVALID_ARGUMENT;
    const fake_profile *p = &table(&s, d->index)[profile];
    if (!p->present) return ERROR_NOT_SUPPORTED;
    unsigned int version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    info->id = p->id;
    info->sliceCount = p->slices;
    info->instanceCount = p->instances;
    info->multiprocessorCount = p->sms;
    info->copyEngineCount = p->slices;
    info->memorySizeMB = p->mem;
    snprintf(info->name, sizeof info->name, "%s", p->name);
    return SUCCESS;
}

int nvmlDeviceGetGpuInstancePossiblePlacements_v2(fake_device *d, unsigned int profileId, nvml_placement *placements,
                                                  unsigned int *count) {
    fake_state s;
    read_state(&s);
    int rc = mig_check(d, &s, CALL_PLACEMENTS);
    if (rc != SUCCESS) return rc;
    if (count == NULL) return ERROR_INVALID_ARGUMENT;
    const fake_profile *p = profile_by_id(&s, d->index, profileId);
    if (p == NULL) return ERROR_INVALID_ARGUMENT;
    if (placements != NULL)
        for (unsigned int i = 0; i < p->starts_count; i++) {
            placements[i].start = p->starts[i];
            placements[i].size = p->size;
        }
    *count = p->starts_count;
    return SUCCESS;
}

int nvmlDeviceGetGpuInstances(fake_device *d, unsigned int profileId, fake_gi **instances, unsigned int *count) {
    fake_state s;
    read_state(&s);
    int rc = mig_check(d, &s, CALL_INSTANCES);
    if (rc != SUCCESS) return rc;
    if (count == NULL || instances == NULL) return ERROR_INVALID_ARGUMENT;
    const fake_profile *p = profile_by_id(&s, d->index, profileId);
    if (p == NULL) return ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int g = 0; g < s.gi_count[d->index]; g++) {
        unsigned int prof = s.gi_profile[d->index][g];
        if (prof >= PROFILE_COUNT || table(&s, d->index)[prof].id != profileId || !table(&s, d->index)[prof].present)
            continue;
        if (n >= p->instances) return ERROR_INSUFFICIENT_SIZE;
        gi_handles[d->index][g].card = d->index;
        gi_handles[d->index][g].slot = g;
        instances[n++] = &gi_handles[d->index][g];
    }
    *count = n;
    return SUCCESS;
}

int nvmlGpuInstanceGetInfo(fake_gi *gi, nvml_gi_info *info) {
    fake_state s;
    read_state(&s);
    if (gi == NULL || info == NULL || gi->card >= MAX_CARDS || gi->slot < 0 || gi->slot >= MAX_GIS)
        return ERROR_INVALID_ARGUMENT;
    fake_device *d = &devices[gi->card];
    int rc = mig_check(d, &s, CALL_INFO);
    if (rc != SUCCESS) return rc;
    if (gi->slot >= s.gi_count[gi->card]) return ERROR_INVALID_ARGUMENT;
    unsigned int prof = s.gi_profile[gi->card][gi->slot];
    if (prof >= PROFILE_COUNT) return ERROR_INVALID_ARGUMENT;
    const fake_profile *p = &table(&s, gi->card)[prof];
    memset(info, 0, sizeof *info);
    info->device = d;
    info->id = (unsigned int)gi->slot + 1;
    info->profileId = p->id;
    info->placement.start = s.gi_start[gi->card][gi->slot];
    info->placement.size = p->size;
    return SUCCESS;
}

int nvmlDeviceGetPerformanceState(fake_device *d, unsigned int *pstate) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    *pstate = 0;
    return SUCCESS;
}

int nvmlDeviceGetRetiredPages(fake_device *d, int cause, unsigned int *count, unsigned long long *addresses) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    if (count == NULL) return ERROR_INVALID_ARGUMENT;
    unsigned int have = cause == 1 ? s.retired[d->index] : 0;
    if (*count < have) {
        *count = have;
        return ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < have && addresses != NULL; i++) addresses[i] = 0x1000ULL * (i + 1);
    *count = have;
    return SUCCESS;
}

int nvmlDeviceGetRetiredPages_v2(fake_device *d, int cause, unsigned int *count, unsigned long long *addresses,
                                 unsigned long long *timestamps) {
    int rc = nvmlDeviceGetRetiredPages(d, cause, count, addresses);
    if (rc == SUCCESS && timestamps != NULL)
        for (unsigned int i = 0; i < *count; i++) timestamps[i] = 1700000000ULL;
    return rc;
}

int nvmlDeviceGetRetiredPagesPendingStatus(fake_device *d, int *pending) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    *pending = s.pending_retire[d->index];
    return SUCCESS;
}

int nvmlDeviceGetTopologyCommonAncestor(fake_device *a, fake_device *b, int *level) {
    fake_state s;
    read_state(&s);
    int rc = check(a, &s);
    if (rc == SUCCESS) rc = check(b, &s);
    if (rc != SUCCESS) return rc;
    if (s.no_topology) return ERROR_NOT_SUPPORTED;
    if (a->index == b->index) *level = 0;              /* INTERNAL */
    else if (a->index / 2 == b->index / 2) *level = 10; /* SINGLE */
    else if (a->index / 4 == b->index / 4) *level = 30; /* HOSTBRIDGE */
    else *level = 50;                                   /* SYSTEM */
    return SUCCESS;
}

static int nvlink_partner(unsigned int index, unsigned int link, int *partner) {
    if (link >= MAX_LINKS) return ERROR_INVALID_ARGUMENT;
    *partner = link < 4 ? (int)(index ^ 1U) : -1;
    return SUCCESS;
}

int nvmlDeviceGetNvLinkState(fake_device *d, unsigned int link, int *active) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    if (s.no_topology) return ERROR_NOT_SUPPORTED;
    int partner;
    rc = nvlink_partner(d->index, link, &partner);
    if (rc != SUCCESS) return rc;
    *active = partner >= 0 && partner < s.cards;
    return SUCCESS;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(fake_device *d, unsigned int link, nvml_pci_info *pci) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    if (s.no_topology) return ERROR_NOT_SUPPORTED;
    int partner;
    rc = nvlink_partner(d->index, link, &partner);
    if (rc != SUCCESS) return rc;
    if (partner < 0 || partner >= s.cards) return ERROR_INVALID_ARGUMENT;
    pci_of((unsigned int)partner, pci);
    return SUCCESS;
}

int nvmlEventSetCreate(fake_event_set **set) {
    fake_state s;
    read_state(&s);
    if (!initialized) return ERROR_UNINITIALIZED;
    if (s.no_events) return ERROR_NOT_SUPPORTED;
    if (set == NULL) return ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof(fake_event_set));
    return *set == NULL ? ERROR_UNKNOWN : SUCCESS;
}

int nvmlEventSetFree(fake_event_set *set) {
    free(set);
    return SUCCESS;
}

int nvmlDeviceGetSupportedEventTypes(fake_device *d, unsigned long long *types) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    if (s.no_events) return ERROR_NOT_SUPPORTED;
    *types = 0x1ULL | 0x2ULL | 0x4ULL | 0x8ULL; /* single/double bit ECC, pstate, XID */
    return SUCCESS;
}

int nvmlDeviceRegisterEvents(fake_device *d, unsigned long long types, fake_event_set *set) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    if (s.no_events) return ERROR_NOT_SUPPORTED;
    if (set == NULL) return ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    set->registered[d->index] |= types;
    pthread_mutex_unlock(&lock);
    return SUCCESS;
}

/* Delivers the next XID line of the state file not yet delivered on this set. */
static int next_event(fake_event_set *set, nvml_event_data *data) {
    fake_state s;
    read_state(&s);
    int found = 0;
    pthread_mutex_lock(&lock);
    for (unsigned int i = 0; i < MAX_CARDS && !found; i++) {
        if ((set->registered[i] & 0x8ULL) == 0) continue;
        if (set->delivered[i] < s.xid_count[i]) {
            memset(data, 0, sizeof *data);
            data->device = &devices[i];
            data->eventType = 0x8ULL;
            data->eventData = s.xid_codes[i][set->delivered[i]];
            set->delivered[i]++;
            found = 1;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

int nvmlEventSetWait_v2(fake_event_set *set, nvml_event_data *data, unsigned int timeout_ms) {
    if (!initialized) return ERROR_UNINITIALIZED;
    if (set == NULL || data == NULL) return ERROR_INVALID_ARGUMENT;
    unsigned int waited = 0;
    for (;;) {
        if (next_event(set, data)) return SUCCESS;
        if (waited >= timeout_ms) return ERROR_TIMEOUT;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        waited += 20;
    }
}
#endif /* FAKE_MINIMAL */
