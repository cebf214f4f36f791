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
 *   mig I              card I has MIG mode enabled
 *   error I            reading card I's name fails with NVML_ERROR_UNKNOWN (a read error)
 *   no_topology        topology and NVLink queries return NOT_SUPPORTED
 *   no_events          event sets are NOT_SUPPORTED
 *   init_fails         nvmlInit_v2 returns DRIVER_NOT_LOADED
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
    ERROR_GPU_IS_LOST = 15,
    ERROR_UNKNOWN = 999,
};

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
} fake_state;

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
    return copy_string(name, length, "NVIDIA H100 80GB HBM3");
}

int nvmlDeviceGetMemoryInfo_v2(fake_device *d, nvml_memory_v2 *memory) {
    fake_state s;
    read_state(&s);
    int rc = check(d, &s);
    if (rc != SUCCESS) return rc;
    if (memory == NULL) return ERROR_INVALID_ARGUMENT;
    memory->total = 80ULL << 30;
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
