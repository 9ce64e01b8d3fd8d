/*
 * fake_dcgm.c: a TEST DOUBLE with DCGM's C ABI (libdcgm.so.4) for the calls Vigil makes. Never
 * loaded by default; tests build it (native/fake-dcgm/build.ts) and point `gpu.dcgm.libraryPath`
 * at it. Layouts and values are written from dcgm_structs.h / dcgm_agent.h (DCGM 3.x/4.x).
 *
 * Scripted by the text file named by $FAKE_DCGM_CONFIG (see README.md), re-read whenever it
 * changes. Like the real library, policy callbacks run on a thread the library owns (pthread),
 * never on the caller's thread.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ DCGM ABI */
typedef int dcgmReturn_t;
enum {
  DCGM_ST_OK = 0, DCGM_ST_BADPARAM = -1, DCGM_ST_INIT_ERROR = -7, DCGM_ST_UNINITIALIZED = -10,
  DCGM_ST_VER_MISMATCH = -12, DCGM_ST_CONNECTION_NOT_VALID = -21,
};
typedef uintptr_t dcgmHandle_t;
typedef uintptr_t dcgmGpuGrp_t;
typedef uintptr_t dcgmStatus_t;
#define MAKE_DCGM_VERSION(t, v) (unsigned int)(sizeof(t) | ((unsigned long)(v) << 24U))
#define DCGM_MAX_NUM_DEVICES 32
#define DCGM_MAX_STR_LENGTH 256
#define DCGM_GROUP_ALL_GPUS 0x7fffffff

typedef struct { unsigned int version, persistAfterDisconnect, timeoutMs, addressIsUnixSocket; } dcgmConnectV2Params_v2;
#define dcgmConnectV2Params_version2 MAKE_DCGM_VERSION(dcgmConnectV2Params_v2, 2)

typedef struct { unsigned int version, memClock, smClock; } dcgmClockSet_t;
typedef struct { unsigned int version, count; dcgmClockSet_t clockSet[256]; } dcgmDeviceSupportedClockSets_t;
typedef struct { unsigned int version, slowdownTemp, shutdownTemp; } dcgmDeviceThermals_t;
typedef struct { unsigned int version, curPowerLimit, defaultPowerLimit, enforcedPowerLimit, minPowerLimit, maxPowerLimit; } dcgmDevicePowerLimits_t;
typedef struct {
  unsigned int version;
  char brandName[DCGM_MAX_STR_LENGTH], deviceName[DCGM_MAX_STR_LENGTH], pciBusId[DCGM_MAX_STR_LENGTH],
      serial[DCGM_MAX_STR_LENGTH], uuid[DCGM_MAX_STR_LENGTH], vbios[DCGM_MAX_STR_LENGTH], inforomImageVersion[DCGM_MAX_STR_LENGTH];
  unsigned int pciDeviceId, pciSubSystemId;
  char driverVersion[DCGM_MAX_STR_LENGTH];
  unsigned int virtualizationMode;
} dcgmDeviceIdentifiers_t;
typedef struct { unsigned int version, bar1Total, fbTotal, fbUsed, fbFree; } dcgmDeviceMemoryUsage_t;
typedef struct { unsigned int version, persistenceModeEnabled, migModeEnabled, confidentialComputeMode; } dcgmDeviceSettings_v2;
typedef struct {
  unsigned int version;
  dcgmDeviceSupportedClockSets_t clockSets;
  dcgmDeviceThermals_t thermalSettings;
  dcgmDevicePowerLimits_t powerLimits;
  dcgmDeviceIdentifiers_t identifiers;
  dcgmDeviceMemoryUsage_t memoryUsage;
  dcgmDeviceSettings_v2 settings;
} dcgmDeviceAttributes_v3;
#define dcgmDeviceAttributes_version3 MAKE_DCGM_VERSION(dcgmDeviceAttributes_v3, 3)
_Static_assert(sizeof(dcgmDeviceAttributes_v3) == 5220, "dcgmDeviceAttributes_v3 layout");
_Static_assert(__builtin_offsetof(dcgmDeviceAttributes_v3, identifiers.pciBusId) == 3636, "pciBusId offset");

typedef struct {
  enum { BOOL, LLONG } tag;
  union { unsigned int boolean; unsigned long long llval; } val;
} dcgmPolicyConditionParams_t;
typedef struct {
  unsigned int version;
  int condition, mode, isolation, action, validation, response;
  dcgmPolicyConditionParams_t parms[7];
} dcgmPolicy_v1;
#define dcgmPolicy_version1 MAKE_DCGM_VERSION(dcgmPolicy_v1, 1)
_Static_assert(sizeof(dcgmPolicy_v1) == 144, "dcgmPolicy_v1 layout");

typedef struct { long long timestamp; enum { L1, L2, DEVICE, REGISTER, TEXTURE } location; unsigned int numerrors; } dcgmPolicyConditionDbe_t;
typedef struct { long long timestamp; unsigned int counter; } dcgmPolicyConditionPci_t;
typedef struct { long long timestamp; unsigned int sbepages, dbepages; } dcgmPolicyConditionMpr_t;
typedef struct { long long timestamp; unsigned int thermalViolation; } dcgmPolicyConditionThermal_t;
typedef struct { long long timestamp; unsigned int powerViolation; } dcgmPolicyConditionPower_t;
typedef struct { long long timestamp; unsigned short fieldId; unsigned int counter; } dcgmPolicyConditionNvlink_t;
typedef struct { long long timestamp; unsigned int errnum; } dcgmPolicyConditionXID_t;
typedef struct {
  unsigned int version;
  int condition;
  union {
    dcgmPolicyConditionDbe_t dbe; dcgmPolicyConditionPci_t pci; dcgmPolicyConditionMpr_t mpr;
    dcgmPolicyConditionThermal_t thermal; dcgmPolicyConditionPower_t power;
    dcgmPolicyConditionNvlink_t nvlink; dcgmPolicyConditionXID_t xid;
  } val;
  unsigned int gpuId;
} dcgmPolicyCallbackResponse_v2;
#define dcgmPolicyCallbackResponse_version2 MAKE_DCGM_VERSION(dcgmPolicyCallbackResponse_v2, 2)
_Static_assert(sizeof(dcgmPolicyCallbackResponse_v2) == 32, "dcgmPolicyCallbackResponse_v2 layout");
typedef int (*fpRecvUpdates)(dcgmPolicyCallbackResponse_v2 *response, uint64_t userData);

enum { COND_DBE = 0x1, COND_PCI = 0x2, COND_MPR = 0x4, COND_THERMAL = 0x8, COND_POWER = 0x10, COND_NVLINK = 0x20, COND_XID = 0x40 };

/* ------------------------------------------------------------------ script */
#define MAX_EVENTS 4096
#define MAX_RC 64
typedef struct { int present; char pci[64]; char uuid[96]; } gpu_t;
typedef struct { long long id; unsigned gpu; int cond; unsigned long long a, b; } event_t;
typedef struct { char fn[64]; int rc; int hangMs; } override_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct stat seen;
static int have_seen;
static gpu_t gpus[DCGM_MAX_NUM_DEVICES];
static event_t events[MAX_EVENTS];
static int nevents;
static override_t overrides[MAX_RC];
static int noverrides;
static int lost; /* host engine gone: every call returns CONNECTION_NOT_VALID, callbacks stop */

static int initialised, connected;
static int registered; /* policy conditions with a callback */
static fpRecvUpdates callback;
static uint64_t callback_user;
static long long delivered; /* highest event id handed to the callback */
static int thread_running, thread_stop;
static pthread_t thread;

/* Re-reads the script when it changed. Caller holds mu. */
static void reload(void) {
  const char *path = getenv("FAKE_DCGM_CONFIG");
  struct stat st;
  if (!path || stat(path, &st) != 0) return;
  if (have_seen && st.st_ino == seen.st_ino && st.st_size == seen.st_size && st.st_mtim.tv_sec == seen.st_mtim.tv_sec &&
      st.st_mtim.tv_nsec == seen.st_mtim.tv_nsec)
    return;
  FILE *f = fopen(path, "r");
  if (!f) return;
  seen = st;
  have_seen = 1;
  memset(gpus, 0, sizeof gpus);
  nevents = noverrides = lost = 0;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char word[32] = "", s1[96] = "", s2[96] = "";
    long long id;
    unsigned g;
    int c;
    unsigned long long a = 0, b = 0;
    if (sscanf(line, "%31s", word) != 1 || word[0] == '#') continue;
    if (!strcmp(word, "gpu") && sscanf(line, "gpu %u %95s %95s", &g, s1, s2) == 3 && g < DCGM_MAX_NUM_DEVICES) {
      gpus[g].present = 1;
      snprintf(gpus[g].pci, sizeof gpus[g].pci, "%s", s1);
      snprintf(gpus[g].uuid, sizeof gpus[g].uuid, "%s", s2);
    } else if (!strcmp(word, "event") && nevents < MAX_EVENTS && sscanf(line, "event %lld %u %i %llu %llu", &id, &g, &c, &a, &b) >= 4) {
      events[nevents++] = (event_t){id, g, c, a, b};
    } else if (!strcmp(word, "rc") && noverrides < MAX_RC && sscanf(line, "rc %63s %d", s1, &c) == 2) {
      snprintf(overrides[noverrides].fn, 64, "%s", s1);
      overrides[noverrides].rc = c;
      overrides[noverrides++].hangMs = 0;
    } else if (!strcmp(word, "hang") && noverrides < MAX_RC && sscanf(line, "hang %63s %d", s1, &c) == 2) {
      snprintf(overrides[noverrides].fn, 64, "%s", s1);
      overrides[noverrides].rc = 0;
      overrides[noverrides++].hangMs = c;
    } else if (!strcmp(word, "lost")) {
      lost = 1;
    }
  }
  fclose(f);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Common entry: re-reads the script, applies a scripted hang and return-code override. */
static dcgmReturn_t enter(const char *fn, int needConnection) {
  pthread_mutex_lock(&mu);
  reload();
  int rc = 0, hang = 0;
  for (int i = 0; i < noverrides; i++)
    if (!strcmp(overrides[i].fn, fn) || !strcmp(overrides[i].fn, "*")) {
      if (overrides[i].hangMs) hang = overrides[i].hangMs;
      else rc = overrides[i].rc;
    }
  if (!rc && needConnection && (lost || !connected)) rc = lost ? DCGM_ST_CONNECTION_NOT_VALID : DCGM_ST_UNINITIALIZED;
  pthread_mutex_unlock(&mu);
  if (hang) sleep_ms(hang);
  return rc;
}

/* The library's own thread: delivers scripted events to the registered callback, in id order. */
static void *deliver(void *unused) {
  (void)unused;
  for (;;) {
    pthread_mutex_lock(&mu);
    if (thread_stop) {
      thread_running = 0;
      pthread_mutex_unlock(&mu);
      return NULL;
    }
    reload();
    event_t next = {0};
    int found = 0;
    if (!lost && callback)
      for (int i = 0; i < nevents; i++)
        if (events[i].id > delivered && (events[i].cond & registered) && (!found || events[i].id < next.id)) {
          next = events[i];
          found = 1;
        }
    fpRecvUpdates cb = callback;
    uint64_t user = callback_user;
    if (found) delivered = next.id;
    pthread_mutex_unlock(&mu);
    if (!found) {
      sleep_ms(2);
      continue;
    }
    dcgmPolicyCallbackResponse_v2 r;
    memset(&r, 0, sizeof r);
    r.version = dcgmPolicyCallbackResponse_version2;
    r.condition = next.cond;
    r.gpuId = next.gpu;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long ts = (long long)now.tv_sec * 1000000LL + now.tv_nsec / 1000; /* usec since 1970, like DCGM */
    switch (next.cond) {
      case COND_DBE: r.val.dbe = (dcgmPolicyConditionDbe_t){ts, DEVICE, (unsigned)next.a}; break;
      case COND_PCI: r.val.pci = (dcgmPolicyConditionPci_t){ts, (unsigned)next.a}; break;
      case COND_MPR: r.val.mpr = (dcgmPolicyConditionMpr_t){ts, (unsigned)next.a, (unsigned)next.b}; break;
      case COND_THERMAL: r.val.thermal = (dcgmPolicyConditionThermal_t){ts, (unsigned)next.a}; break;
      case COND_POWER: r.val.power = (dcgmPolicyConditionPower_t){ts, (unsigned)next.a}; break;
      case COND_NVLINK: r.val.nvlink = (dcgmPolicyConditionNvlink_t){ts, (unsigned short)next.a, (unsigned)next.b}; break;
      case COND_XID: r.val.xid = (dcgmPolicyConditionXID_t){ts, (unsigned)next.a}; break;
      default: break;
    }
    cb(&r, user);
  }
}

/* ------------------------------------------------------------------ API */
dcgmReturn_t dcgmInit(void) {
  dcgmReturn_t rc = enter("dcgmInit", 0);
  if (rc) return rc;
  if (!getenv("FAKE_DCGM_CONFIG")) return DCGM_ST_INIT_ERROR;
  initialised = 1;
  return DCGM_ST_OK;
}

/* Like DCGM, shutdown ends the library's threads before returning, so the library can be unloaded.
 * The caller must have let any callback in flight finish (unregister, then yield to its loop). */
dcgmReturn_t dcgmShutdown(void) {
  pthread_mutex_lock(&mu);
  initialised = connected = 0;
  registered = 0;
  callback = NULL;
  thread_stop = 1;
  int join = thread_running;
  pthread_mutex_unlock(&mu);
  if (join) pthread_join(thread, NULL);
  return DCGM_ST_OK;
}

static dcgmReturn_t open_handle(dcgmHandle_t *h) {
  if (!initialised) return DCGM_ST_UNINITIALIZED;
  if (!h) return DCGM_ST_BADPARAM;
  pthread_mutex_lock(&mu);
  int isLost = lost;
  if (!isLost) connected = 1;
  pthread_mutex_unlock(&mu);
  if (isLost) return DCGM_ST_CONNECTION_NOT_VALID;
  *h = 1;
  return DCGM_ST_OK;
}

dcgmReturn_t dcgmConnect_v2(const char *ipAddress, dcgmConnectV2Params_v2 *params, dcgmHandle_t *h) {
  dcgmReturn_t rc = enter("dcgmConnect_v2", 0);
  if (rc) return rc;
  if (!ipAddress || !params) return DCGM_ST_BADPARAM;
  if (params->version != dcgmConnectV2Params_version2) return DCGM_ST_VER_MISMATCH;
  return open_handle(h);
}

dcgmReturn_t dcgmStartEmbedded(int opMode, dcgmHandle_t *h) {
  dcgmReturn_t rc = enter("dcgmStartEmbedded", 0);
  if (rc) return rc;
  if (opMode != 1 && opMode != 2) return DCGM_ST_BADPARAM;
  return open_handle(h);
}

static dcgmReturn_t close_handle(dcgmHandle_t h) {
  if (h != 1) return DCGM_ST_BADPARAM;
  pthread_mutex_lock(&mu);
  connected = 0;
  registered = 0;
  callback = NULL;
  thread_stop = 1;
  pthread_mutex_unlock(&mu);
  return DCGM_ST_OK;
}

dcgmReturn_t dcgmDisconnect(dcgmHandle_t h) { return close_handle(h); }
dcgmReturn_t dcgmStopEmbedded(dcgmHandle_t h) { return close_handle(h); }

dcgmReturn_t dcgmGetAllSupportedDevices(dcgmHandle_t h, unsigned int gpuIdList[DCGM_MAX_NUM_DEVICES], int *count) {
  dcgmReturn_t rc = enter("dcgmGetAllSupportedDevices", 1);
  if (rc) return rc;
  if (h != 1 || !gpuIdList || !count) return DCGM_ST_BADPARAM;
  pthread_mutex_lock(&mu);
  int n = 0;
  for (unsigned i = 0; i < DCGM_MAX_NUM_DEVICES; i++)
    if (gpus[i].present) gpuIdList[n++] = i;
  pthread_mutex_unlock(&mu);
  *count = n;
  return DCGM_ST_OK;
}

dcgmReturn_t dcgmGetDeviceAttributes(dcgmHandle_t h, unsigned int gpuId, dcgmDeviceAttributes_v3 *attr) {
  dcgmReturn_t rc = enter("dcgmGetDeviceAttributes", 1);
  if (rc) return rc;
  if (h != 1 || !attr || gpuId >= DCGM_MAX_NUM_DEVICES) return DCGM_ST_BADPARAM;
  if (attr->version != dcgmDeviceAttributes_version3) return DCGM_ST_VER_MISMATCH;
  pthread_mutex_lock(&mu);
  gpu_t g = gpus[gpuId];
  pthread_mutex_unlock(&mu);
  if (!g.present) return DCGM_ST_BADPARAM;
  memset((char *)attr + sizeof attr->version, 0, sizeof *attr - sizeof attr->version);
  snprintf(attr->identifiers.pciBusId, DCGM_MAX_STR_LENGTH, "%s", g.pci);
  snprintf(attr->identifiers.uuid, DCGM_MAX_STR_LENGTH, "%s", g.uuid);
  snprintf(attr->identifiers.deviceName, DCGM_MAX_STR_LENGTH, "NVIDIA H100 80GB HBM3");
  return DCGM_ST_OK;
}

dcgmReturn_t dcgmPolicySet(dcgmHandle_t h, dcgmGpuGrp_t group, dcgmPolicy_v1 *policy, dcgmStatus_t status) {
  (void)status;
  dcgmReturn_t rc = enter("dcgmPolicySet", 1);
  if (rc) return rc;
  if (h != 1 || group != DCGM_GROUP_ALL_GPUS || !policy) return DCGM_ST_BADPARAM;
  if (policy->version != dcgmPolicy_version1) return DCGM_ST_VER_MISMATCH;
  return DCGM_ST_OK;
}

dcgmReturn_t dcgmPolicyRegister_v2(dcgmHandle_t h, dcgmGpuGrp_t group, int condition, fpRecvUpdates cb, uint64_t userData) {
  dcgmReturn_t rc = enter("dcgmPolicyRegister_v2", 1);
  if (rc) return rc;
  if (h != 1 || group != DCGM_GROUP_ALL_GPUS || !cb) return DCGM_ST_BADPARAM;
  pthread_mutex_lock(&mu);
  /* Like the engine: only violations after registration are delivered. */
  if (!callback) {
    delivered = 0;
    for (int i = 0; i < nevents; i++)
      if (events[i].id > delivered) delivered = events[i].id;
  }
  registered |= condition;
  callback = cb;
  callback_user = userData;
  int start = !thread_running;
  thread_stop = 0;
  if (start) thread_running = 1;
  pthread_mutex_unlock(&mu);
  if (start && pthread_create(&thread, NULL, deliver, NULL) != 0) {
    thread_running = 0;
    return DCGM_ST_INIT_ERROR;
  }
  return DCGM_ST_OK;
}

dcgmReturn_t dcgmPolicyUnregister(dcgmHandle_t h, dcgmGpuGrp_t group, int condition) {
  dcgmReturn_t rc = enter("dcgmPolicyUnregister", 1);
  if (rc) return rc;
  if (h != 1 || group != DCGM_GROUP_ALL_GPUS) return DCGM_ST_BADPARAM;
  pthread_mutex_lock(&mu);
  registered &= ~condition;
  if (!registered) callback = NULL;
  pthread_mutex_unlock(&mu);
  return DCGM_ST_OK;
}

const char *dcgmErrorString(dcgmReturn_t rc) {
  switch (rc) {
    case DCGM_ST_OK: return "Success";
    case DCGM_ST_BADPARAM: return "Bad parameter passed to function";
    case DCGM_ST_INIT_ERROR: return "DCGM initialization error";
    case DCGM_ST_UNINITIALIZED: return "Uninitialized";
    case DCGM_ST_VER_MISMATCH: return "Version mismatch";
    case DCGM_ST_CONNECTION_NOT_VALID: return "Host engine connection invalid/disconnected";
    default: return "Unknown error";
  }
}
