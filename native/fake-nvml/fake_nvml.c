/*
 * fake_nvml.c: a TEST DOUBLE with NVML's C ABI for the functions Vigil calls. Never loaded by
 * default; tests build it (native/fake-nvml/build.ts or the Makefile) and point Vigil's
 * `gpu.libraryPath` at it.
 *
 * The fake GPUs and their faults come from a JSON file named by $FAKE_NVML_CONFIG. Every call
 * stat()s the file and re-parses it when it changed (inode, size or mtime), so tests script faults
 * at run time by rewriting it (write a temp file and rename it over, so no reader sees half a file).
 * See native/fake-nvml/README.md for the schema.
 *
 * Missing-symbol variants: build with -DOMIT_<symbol> (e.g. -DOMIT_nvmlDeviceGetRemappedRows) and
 * that function is left out of the library, like on an older driver.
 *
 * Thread-safe: Vigil calls from two worker threads at once. The config is read under a mutex and
 * scripted hangs sleep outside it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ NVML ABI (from nvml.h) */
typedef int nvmlReturn_t;
enum {
  NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_TIMEOUT = 10, NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25, NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 64
struct nvmlDevice_st { int index; };
typedef struct nvmlDevice_st *nvmlDevice_t;

struct nvmlEventSet_st {
  unsigned long long mask[MAX_GPUS]; /* registered event types per GPU index */
  long long last_id;                 /* highest scripted event id already consumed */
};
typedef struct nvmlEventSet_st *nvmlEventSet_t;

typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t; /* v3, 68 bytes */

typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType, eventData;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t; /* 32 bytes */

typedef union {
  double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal;
  long long sllVal; int siVal; unsigned short usVal;
} nvmlValue_t;

typedef struct {
  unsigned int fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
} nvmlFieldValue_t; /* 40 bytes */

/* nvmlGpuFabricInfo_t (v1, nvmlDeviceGetGpuFabricInfo): 28 bytes, align 4. */
#define NVML_GPU_FABRIC_UUID_LEN 16
typedef unsigned char nvmlGpuFabricState_t;
typedef struct {
  unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
  nvmlReturn_t status;
  unsigned int cliqueId;
  nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

/* nvmlGpuFabricInfo_v2_t (nvmlDeviceGetGpuFabricInfoV): 36 bytes, version = sizeof | 2 << 24. */
typedef struct {
  unsigned int version;
  unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
  nvmlReturn_t status;
  unsigned int cliqueId;
  nvmlGpuFabricState_t state;
  unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;
#define nvmlGpuFabricInfo_v2 (unsigned int)(sizeof(nvmlGpuFabricInfo_v2_t) | (2 << 24U))
_Static_assert(sizeof(nvmlGpuFabricInfo_t) == 28, "nvmlGpuFabricInfo_t layout");
_Static_assert(sizeof(nvmlGpuFabricInfo_v2_t) == 36, "nvmlGpuFabricInfo_v2_t layout");

#define FI_DEV_NVLINK_LINK_COUNT 91
#define FI_DEV_GET_GPU_RECOVERY_ACTION 230
#define DEFAULT_SUPPORTED_EVENTS 0xCC0BULL /* SBE|DBE|Xid|DramRetirement(+Failure)|GpuUnavailable|RecoveryAction */

/* ------------------------------------------------------------------ minimal JSON */
enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
typedef struct json {
  int type;
  double num;
  char *str, *key;
  struct json *child, *next;
} json;

typedef struct { const char *p; int err; } jparser;

static void jfree(json *j) {
  while (j) {
    json *n = j->next;
    jfree(j->child);
    free(j->str);
    free(j->key);
    free(j);
    j = n;
  }
}

static void jws(jparser *ps) { while (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t') ps->p++; }

static char *jparse_string(jparser *ps) {
  if (*ps->p != '"') { ps->err = 1; return NULL; }
  ps->p++;
  size_t cap = 32, n = 0;
  char *out = malloc(cap);
  while (*ps->p && *ps->p != '"') {
    char c = *ps->p++;
    if (c == '\\') {
      c = *ps->p++;
      switch (c) {
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        case 'r': c = '\r'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'u': /* keep it simple: ASCII only */
          if (strlen(ps->p) < 4) { ps->err = 1; free(out); return NULL; }
          c = (char)strtol((char[]){ps->p[0], ps->p[1], ps->p[2], ps->p[3], 0}, NULL, 16);
          ps->p += 4;
          break;
        case 0: ps->err = 1; free(out); return NULL;
        default: break; /* \" \\ \/ */
      }
    }
    if (n + 2 > cap) out = realloc(out, cap *= 2);
    out[n++] = c;
  }
  if (*ps->p != '"') { ps->err = 1; free(out); return NULL; }
  ps->p++;
  out[n] = 0;
  return out;
}

static json *jparse_value(jparser *ps, int depth) {
  if (depth > 32) { ps->err = 1; return NULL; }
  jws(ps);
  json *j = calloc(1, sizeof *j);
  char c = *ps->p;
  if (c == '{' || c == '[') {
    j->type = c == '{' ? J_OBJ : J_ARR;
    char close = c == '{' ? '}' : ']';
    ps->p++;
    jws(ps);
    json **tail = &j->child;
    if (*ps->p == close) { ps->p++; return j; }
    for (;;) {
      char *key = NULL;
      if (j->type == J_OBJ) {
        jws(ps);
        key = jparse_string(ps);
        if (ps->err) break;
        jws(ps);
        if (*ps->p != ':') { ps->err = 1; free(key); break; }
        ps->p++;
      }
      json *v = jparse_value(ps, depth + 1);
      if (ps->err) { free(key); jfree(v); break; }
      v->key = key;
      *tail = v;
      tail = &v->next;
      jws(ps);
      if (*ps->p == ',') { ps->p++; continue; }
      if (*ps->p == close) { ps->p++; break; }
      ps->err = 1;
      break;
    }
  } else if (c == '"') {
    j->type = J_STR;
    j->str = jparse_string(ps);
  } else if (!strncmp(ps->p, "true", 4)) {
    j->type = J_BOOL; j->num = 1; ps->p += 4;
  } else if (!strncmp(ps->p, "false", 5)) {
    j->type = J_BOOL; ps->p += 5;
  } else if (!strncmp(ps->p, "null", 4)) {
    j->type = J_NULL; ps->p += 4;
  } else {
    char *end;
    j->type = J_NUM;
    j->num = strtod(ps->p, &end);
    if (end == ps->p) ps->err = 1;
    ps->p = end;
  }
  if (ps->err) { jfree(j); return NULL; }
  return j;
}

static json *jparse(const char *text) {
  jparser ps = {text, 0};
  json *j = jparse_value(&ps, 0);
  jws(&ps);
  if (ps.err || *ps.p) { jfree(j); return NULL; }
  return j;
}

/* Object member (NULL when absent, or when obj is not an object). */
static json *jget(json *obj, const char *key) {
  if (!obj || obj->type != J_OBJ) return NULL;
  for (json *c = obj->child; c; c = c->next)
    if (!strcmp(c->key, key)) return c;
  return NULL;
}
static json *jat(json *arr, int i) {
  if (!arr || arr->type != J_ARR) return NULL;
  for (json *c = arr->child; c; c = c->next, i--)
    if (i == 0) return c;
  return NULL;
}
static int jlen(json *arr) {
  int n = 0;
  if (arr && arr->type == J_ARR)
    for (json *c = arr->child; c; c = c->next) n++;
  return n;
}
static double jnum(json *obj, const char *key, double def) {
  json *v = jget(obj, key);
  return v && (v->type == J_NUM || v->type == J_BOOL) ? v->num : def;
}
static const char *jstr(json *obj, const char *key, const char *def) {
  json *v = jget(obj, key);
  return v && v->type == J_STR ? v->str : def;
}
/* Scripted member that may be absent (use the default), null (NOT_SUPPORTED) or a value. */
static int jnull(json *obj, const char *key) {
  json *v = jget(obj, key);
  return v && v->type == J_NULL;
}

/* ------------------------------------------------------------------ scripted state */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static json *g_cfg;
static struct stat g_st;
static int g_init_count;
static struct nvmlDevice_st g_devs[MAX_GPUS];

static void reload_locked(void) {
  const char *path = getenv("FAKE_NVML_CONFIG");
  struct stat st;
  if (!path || stat(path, &st) != 0) return; /* keep the last good config */
  if (g_cfg && st.st_ino == g_st.st_ino && st.st_size == g_st.st_size &&
      st.st_mtim.tv_sec == g_st.st_mtim.tv_sec && st.st_mtim.tv_nsec == g_st.st_mtim.tv_nsec)
    return;
  FILE *f = fopen(path, "rb");
  if (!f) return;
  char *buf = malloc((size_t)st.st_size + 1);
  size_t n = fread(buf, 1, (size_t)st.st_size, f);
  fclose(f);
  buf[n] = 0;
  json *j = jparse(buf);
  free(buf);
  if (!j) return; /* half-written file: keep the previous config */
  jfree(g_cfg);
  g_cfg = j;
  g_st = st;
}

static void sleep_ms(long ms) {
  if (ms <= 0) return;
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

static int gpu_count(void) {
  json *gpus = jget(g_cfg, "gpus");
  int n = (int)jnum(g_cfg, "count", jlen(gpus));
  if (n > jlen(gpus)) n = jlen(gpus);
  return n > MAX_GPUS ? MAX_GPUS : n;
}

/* Per-function override from a {"fnName": value, "*": value} map. */
static int lookup_override(json *map, const char *fn, int *out) {
  json *v = jget(map, fn);
  if (!v) v = jget(map, "*");
  if (!v || v->type != J_NUM) return 0;
  *out = (int)v->num;
  return 1;
}

/* Every entry point starts here (lock held on return; caller must call leave()). */
static nvmlReturn_t enter_sys(const char *fn, int *hang) {
  pthread_mutex_lock(&g_mu);
  reload_locked();
  *hang = 0;
  lookup_override(jget(g_cfg, "hang"), fn, hang);
  int rc;
  if (lookup_override(jget(g_cfg, "rc"), fn, &rc)) return rc;
  if (!g_cfg) return NVML_ERROR_DRIVER_NOT_LOADED;
  return NVML_SUCCESS;
}

static nvmlReturn_t enter_dev(const char *fn, nvmlDevice_t dev, json **gpu, int *hang) {
  pthread_mutex_lock(&g_mu);
  reload_locked();
  *hang = 0;
  *gpu = NULL;
  if (g_init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!dev || dev < g_devs || dev >= g_devs + MAX_GPUS || dev->index >= jlen(jget(g_cfg, "gpus")))
    return NVML_ERROR_INVALID_ARGUMENT;
  *gpu = jat(jget(g_cfg, "gpus"), dev->index);
  lookup_override(jget(*gpu, "hang"), fn, hang);
  int rc;
  if (lookup_override(jget(*gpu, "rc"), fn, &rc)) return rc;
  return NVML_SUCCESS;
}

static nvmlReturn_t leave(nvmlReturn_t rc, int hang) {
  pthread_mutex_unlock(&g_mu);
  sleep_ms(hang);
  return rc;
}

static void copy_str(char *dst, unsigned int len, const char *src) {
  if (!len) return;
  strncpy(dst, src, len - 1);
  dst[len - 1] = 0;
}

static int parse_bus_id(const char *s, unsigned *dom, unsigned *bus, unsigned *dev) {
  return sscanf(s, "%x:%x:%x", dom, bus, dev) == 3;
}

/* ------------------------------------------------------------------ system */
const char *nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error (fake)";
  }
}

#ifndef OMIT_nvmlInit_v2
nvmlReturn_t nvmlInit_v2(void) {
  int hang;
  nvmlReturn_t rc = enter_sys("nvmlInit_v2", &hang);
  if (rc == NVML_SUCCESS) {
    g_init_count++;
    for (int i = 0; i < MAX_GPUS; i++) g_devs[i].index = i;
  }
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlShutdown
nvmlReturn_t nvmlShutdown(void) {
  int hang;
  nvmlReturn_t rc = enter_sys("nvmlShutdown", &hang);
  if (g_init_count <= 0) rc = NVML_ERROR_UNINITIALIZED;
  else if (rc == NVML_SUCCESS) g_init_count--;
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlSystemGetDriverVersion
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
  int hang;
  nvmlReturn_t rc = enter_sys("nvmlSystemGetDriverVersion", &hang);
  if (rc == NVML_SUCCESS) {
    const char *v = jstr(g_cfg, "driverVersion", "550.54.15");
    if (strlen(v) + 1 > length) rc = NVML_ERROR_INSUFFICIENT_SIZE;
    else copy_str(version, length, v);
  }
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceGetCount_v2
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
  int hang;
  nvmlReturn_t rc = enter_sys("nvmlDeviceGetCount_v2", &hang);
  if (rc == NVML_SUCCESS && g_init_count <= 0) rc = NVML_ERROR_UNINITIALIZED;
  if (rc == NVML_SUCCESS) *count = (unsigned)gpu_count();
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceGetHandleByIndex_v2
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
  int hang;
  nvmlReturn_t rc = enter_sys("nvmlDeviceGetHandleByIndex_v2", &hang);
  if (rc == NVML_SUCCESS && g_init_count <= 0) rc = NVML_ERROR_UNINITIALIZED;
  if (rc == NVML_SUCCESS && (int)index >= gpu_count()) rc = NVML_ERROR_INVALID_ARGUMENT;
  if (rc == NVML_SUCCESS) {
    json *gpu = jat(jget(g_cfg, "gpus"), (int)index);
    int over;
    lookup_override(jget(gpu, "hang"), "nvmlDeviceGetHandleByIndex_v2", &hang);
    if (lookup_override(jget(gpu, "rc"), "nvmlDeviceGetHandleByIndex_v2", &over)) rc = over;
    else *device = &g_devs[index];
  }
  return leave(rc, hang);
}
#endif

/* ------------------------------------------------------------------ identity */
#define DEV_BEGIN(fn)                                \
  json *gpu;                                         \
  int hang;                                          \
  nvmlReturn_t rc = enter_dev(fn, device, &gpu, &hang); \
  if (rc != NVML_SUCCESS) return leave(rc, hang);

#ifndef OMIT_nvmlDeviceGetUUID
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
  DEV_BEGIN("nvmlDeviceGetUUID");
  char def[64];
  snprintf(def, sizeof def, "GPU-00000000-fake-0000-0000-%012d", device->index);
  copy_str(uuid, length, jstr(gpu, "uuid", def));
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceGetName
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
  DEV_BEGIN("nvmlDeviceGetName");
  copy_str(name, length, jstr(gpu, "name", "NVIDIA H100 80GB HBM3"));
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceGetSerial
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
  DEV_BEGIN("nvmlDeviceGetSerial");
  if (jnull(gpu, "serial")) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  char def[32];
  snprintf(def, sizeof def, "165432100%04d", device->index);
  copy_str(serial, length, jstr(gpu, "serial", def));
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceGetPciInfo_v3
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
  DEV_BEGIN("nvmlDeviceGetPciInfo_v3");
  char def[32];
  snprintf(def, sizeof def, "00000000:%02X:00.0", 0x18 + device->index * 0x10);
  unsigned dom = 0, bus = 0, dev = 0;
  if (!parse_bus_id(jstr(gpu, "pci", def), &dom, &bus, &dev)) return leave(NVML_ERROR_UNKNOWN, hang);
  memset(pci, 0, sizeof *pci);
  pci->domain = dom;
  pci->bus = bus;
  pci->device = dev;
  pci->pciDeviceId = ((unsigned)jnum(gpu, "pciDeviceId", 0x2330) << 16) | 0x10DE;
  pci->pciSubSystemId = 0x16C110DE;
  snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", dom & 0xFFFF, bus, dev);
  snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", dom, bus, dev);
  return leave(rc, hang);
}
#endif

/* ------------------------------------------------------------------ events */
#ifndef OMIT_nvmlDeviceGetSupportedEventTypes
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
  DEV_BEGIN("nvmlDeviceGetSupportedEventTypes");
  *eventTypes = (unsigned long long)jnum(gpu, "supportedEvents", (double)DEFAULT_SUPPORTED_EVENTS);
  return leave(rc, hang);
}
#endif

__attribute__((unused)) static long long max_event_id(void) {
  long long m = 0;
  for (json *e = jget(g_cfg, "events") ? jget(g_cfg, "events")->child : NULL; e; e = e->next)
    if (jnum(e, "id", 0) > m) m = (long long)jnum(e, "id", 0);
  return m;
}

#ifndef OMIT_nvmlEventSetCreate
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
  int hang;
  nvmlReturn_t rc = enter_sys("nvmlEventSetCreate", &hang);
  if (rc == NVML_SUCCESS) {
    *set = calloc(1, sizeof **set);
    /* Like NVML: events that happened before the set existed are never delivered. */
    (*set)->last_id = max_event_id();
  }
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceRegisterEvents
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
  DEV_BEGIN("nvmlDeviceRegisterEvents");
  unsigned long long supported = (unsigned long long)jnum(gpu, "supportedEvents", (double)DEFAULT_SUPPORTED_EVENTS);
  if (!set) return leave(NVML_ERROR_INVALID_ARGUMENT, hang);
  if (eventTypes & ~supported) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  set->mask[device->index] |= eventTypes;
  return leave(rc, hang);
}
#endif

/* Next scripted event for this set, or NULL. Events: [{"id", "gpu", "type", "data", "rc"}]. */
__attribute__((unused)) static json *next_event(nvmlEventSet_t set) {
  json *best = NULL;
  for (json *e = jget(g_cfg, "events") ? jget(g_cfg, "events")->child : NULL; e; e = e->next) {
    long long id = (long long)jnum(e, "id", 0);
    int gpu = (int)jnum(e, "gpu", 0);
    unsigned long long type = (unsigned long long)jnum(e, "type", 8);
    if (id <= set->last_id || gpu < 0 || gpu >= MAX_GPUS) continue;
    int forced_rc = jget(e, "rc") != NULL; /* a scripted wait error is delivered to every set */
    if (!forced_rc && !(set->mask[gpu] & type)) continue;
    if (!best || id < (long long)jnum(best, "id", 0)) best = e;
  }
  return best;
}

#ifndef OMIT_nvmlEventSetWait_v2
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int hang;
    nvmlReturn_t rc = enter_sys("nvmlEventSetWait_v2", &hang);
    if (rc == NVML_SUCCESS && g_init_count <= 0) rc = NVML_ERROR_UNINITIALIZED;
    if (rc == NVML_SUCCESS && !set) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS) return leave(rc, hang);
    if (hang) return leave(NVML_ERROR_TIMEOUT, hang); /* a wait stuck past its own timeout */
    json *e = next_event(set);
    if (e) {
      int gpu = (int)jnum(e, "gpu", 0);
      set->last_id = (long long)jnum(e, "id", 0);
      memset(data, 0, sizeof *data);
      data->device = &g_devs[gpu];
      data->eventType = (unsigned long long)jnum(e, "type", 8);
      data->eventData = (unsigned long long)jnum(e, "data", 0);
      data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
      return leave((nvmlReturn_t)jnum(e, "rc", NVML_SUCCESS), 0);
    }
    pthread_mutex_unlock(&g_mu);
    clock_gettime(CLOCK_MONOTONIC, &t);
    long elapsed = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
    if (elapsed >= (long)timeoutms) return NVML_ERROR_TIMEOUT;
    sleep_ms(5); /* the real call sleeps in the kernel; 5 ms keeps delivery latency low */
  }
}
#endif

#ifndef OMIT_nvmlEventSetFree
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  int hang;
  nvmlReturn_t rc = enter_sys("nvmlEventSetFree", &hang);
  free(set);
  return leave(rc, hang);
}
#endif

/* ------------------------------------------------------------------ memory */
#ifndef OMIT_nvmlDeviceGetRemappedRows
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred) {
  DEV_BEGIN("nvmlDeviceGetRemappedRows");
  if (jnull(gpu, "remappedRows")) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  json *r = jget(gpu, "remappedRows");
  *corrRows = (unsigned)jnum(r, "corr", 0);
  *uncRows = (unsigned)jnum(r, "unc", 0);
  *isPending = (unsigned)jnum(r, "pending", 0);
  *failureOccurred = (unsigned)jnum(r, "failure", 0);
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceGetRetiredPages
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *pageCount,
                                       unsigned long long *addresses) {
  DEV_BEGIN("nvmlDeviceGetRetiredPages");
  json *r = jget(gpu, "retiredPages"); /* absent or null: an Ampere-or-newer GPU */
  if (!r || r->type != J_OBJ) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  unsigned n = (unsigned)jnum(r, cause == 0 ? "sbe" : "dbe", 0);
  if (*pageCount < n) {
    *pageCount = n;
    return leave(n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS, hang);
  }
  for (unsigned i = 0; addresses && i < n; i++) addresses[i] = 0x1000ULL * (i + 1);
  *pageCount = n;
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceGetRetiredPagesPendingStatus
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *isPending) {
  DEV_BEGIN("nvmlDeviceGetRetiredPagesPendingStatus");
  json *r = jget(gpu, "retiredPages");
  if (!r || r->type != J_OBJ) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  *isPending = (int)jnum(r, "pending", 0);
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceGetTotalEccErrors
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType,
                                         unsigned long long *eccCounts) {
  DEV_BEGIN("nvmlDeviceGetTotalEccErrors");
  if (jnull(gpu, "eccUncorrectedVolatile")) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  const char *key = errorType == 1 ? (counterType == 0 ? "eccUncorrectedVolatile" : "eccUncorrectedAggregate")
                                   : (counterType == 0 ? "eccCorrectedVolatile" : "eccCorrectedAggregate");
  *eccCounts = (unsigned long long)jnum(gpu, key, 0);
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceGetEccMode
/* "eccMode": {"current": 1, "pending": 1} (default enabled); null = NOT_SUPPORTED. */
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int *current, int *pending) {
  DEV_BEGIN("nvmlDeviceGetEccMode");
  if (jnull(gpu, "eccMode") || jnull(gpu, "eccUncorrectedVolatile")) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  json *m = jget(gpu, "eccMode");
  *current = (int)jnum(m, "current", 1);
  *pending = (int)jnum(m, "pending", jnum(m, "current", 1));
  return leave(rc, hang);
}
#endif

/* ------------------------------------------------------------------ NVSwitch fabric */
/* "fabric": {"state": 3, "status": 0, "cliqueId": 1, "clusterUuid": "...", "healthMask": 0}; absent or null = NOT_SUPPORTED. */
static void fabric_uuid(json *f, unsigned char *out) {
  const char *u = jstr(f, "clusterUuid", "");
  memset(out, 0, NVML_GPU_FABRIC_UUID_LEN);
  for (int i = 0; i < NVML_GPU_FABRIC_UUID_LEN && u[i]; i++) out[i] = (unsigned char)u[i];
}

#ifndef OMIT_nvmlDeviceGetGpuFabricInfo
nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
  DEV_BEGIN("nvmlDeviceGetGpuFabricInfo");
  json *f = jget(gpu, "fabric");
  if (!f || f->type != J_OBJ) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  memset(info, 0, sizeof *info);
  fabric_uuid(f, info->clusterUuid);
  info->status = (nvmlReturn_t)jnum(f, "status", NVML_SUCCESS);
  info->cliqueId = (unsigned)jnum(f, "cliqueId", 0);
  info->state = (nvmlGpuFabricState_t)jnum(f, "state", 3);
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceGetGpuFabricInfoV
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfo_v2_t *info) {
  DEV_BEGIN("nvmlDeviceGetGpuFabricInfoV");
  if (!info) return leave(NVML_ERROR_INVALID_ARGUMENT, hang);
  /* Like NVML: the caller states the struct version it passes. */
  if (info->version != nvmlGpuFabricInfo_v2) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, hang);
  json *f = jget(gpu, "fabric");
  if (!f || f->type != J_OBJ) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  fabric_uuid(f, info->clusterUuid);
  info->status = (nvmlReturn_t)jnum(f, "status", NVML_SUCCESS);
  info->cliqueId = (unsigned)jnum(f, "cliqueId", 0);
  info->state = (nvmlGpuFabricState_t)jnum(f, "state", 3);
  info->healthMask = (unsigned)jnum(f, "healthMask", 0);
  return leave(rc, hang);
}
#endif

/* ------------------------------------------------------------------ PCIe */
static nvmlReturn_t pcie_value(nvmlDevice_t device, const char *fn, const char *key, double def, unsigned int *out) {
  DEV_BEGIN(fn);
  json *p = jget(gpu, "pcie");
  if (jnull(gpu, "pcie") || jnull(p, key)) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  *out = (unsigned)jnum(p, key, def);
  return leave(rc, hang);
}
#ifndef OMIT_nvmlDeviceGetPcieReplayCounter
nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t d, unsigned int *v) { return pcie_value(d, "nvmlDeviceGetPcieReplayCounter", "replay", 0, v); }
#endif
#ifndef OMIT_nvmlDeviceGetCurrPcieLinkGeneration
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *v) { return pcie_value(d, "nvmlDeviceGetCurrPcieLinkGeneration", "gen", 5, v); }
#endif
#ifndef OMIT_nvmlDeviceGetMaxPcieLinkGeneration
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *v) { return pcie_value(d, "nvmlDeviceGetMaxPcieLinkGeneration", "maxGen", 5, v); }
#endif
#ifndef OMIT_nvmlDeviceGetCurrPcieLinkWidth
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *v) { return pcie_value(d, "nvmlDeviceGetCurrPcieLinkWidth", "width", 16, v); }
#endif
#ifndef OMIT_nvmlDeviceGetMaxPcieLinkWidth
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *v) { return pcie_value(d, "nvmlDeviceGetMaxPcieLinkWidth", "maxWidth", 16, v); }
#endif

/* ------------------------------------------------------------------ clocks and thermals */
static nvmlReturn_t clock_reasons(nvmlDevice_t device, const char *fn, unsigned long long *reasons) {
  DEV_BEGIN(fn);
  if (jnull(gpu, "clocksEventReasons")) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  *reasons = (unsigned long long)jnum(gpu, "clocksEventReasons", 0);
  return leave(rc, hang);
}
#ifndef OMIT_nvmlDeviceGetCurrentClocksEventReasons
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) { return clock_reasons(d, "nvmlDeviceGetCurrentClocksEventReasons", r); }
#endif
#ifndef OMIT_nvmlDeviceGetCurrentClocksThrottleReasons
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) { return clock_reasons(d, "nvmlDeviceGetCurrentClocksThrottleReasons", r); }
#endif

#ifndef OMIT_nvmlDeviceGetTemperature
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensorType, unsigned int *temp) {
  DEV_BEGIN("nvmlDeviceGetTemperature");
  if (sensorType != 0 || jnull(gpu, "temperature")) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  *temp = (unsigned)jnum(gpu, "temperature", 40);
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceGetTemperatureThreshold
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, int thresholdType, unsigned int *temp) {
  DEV_BEGIN("nvmlDeviceGetTemperatureThreshold");
  const char *key = thresholdType == 0 ? "shutdownTemp" : thresholdType == 1 ? "slowdownTemp" : NULL;
  if (!key || jnull(gpu, key)) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  *temp = (unsigned)jnum(gpu, key, thresholdType == 0 ? 92 : 87);
  return leave(rc, hang);
}
#endif

/* ------------------------------------------------------------------ NVLink */
/* "nvlink": {"links": 18, "inactive": [3], "errors": [[replay, recovery, crcFlit, crcData, eccData], ...]} */
static int nvlink_links(json *gpu) {
  if (jnull(gpu, "nvlink")) return 0;
  return (int)jnum(jget(gpu, "nvlink"), "links", 18);
}

#ifndef OMIT_nvmlDeviceGetNvLinkState
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, int *isActive) {
  DEV_BEGIN("nvmlDeviceGetNvLinkState");
  int links = nvlink_links(gpu);
  if (links == 0) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  if ((int)link >= links) return leave(NVML_ERROR_INVALID_ARGUMENT, hang);
  *isActive = 1;
  for (json *l = jget(jget(gpu, "nvlink"), "inactive") ? jget(jget(gpu, "nvlink"), "inactive")->child : NULL; l; l = l->next)
    if ((unsigned)l->num == link) *isActive = 0;
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceGetNvLinkErrorCounter
nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, int counter,
                                             unsigned long long *value) {
  DEV_BEGIN("nvmlDeviceGetNvLinkErrorCounter");
  int links = nvlink_links(gpu);
  if (links == 0) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  if ((int)link >= links || counter < 0 || counter > 4) return leave(NVML_ERROR_INVALID_ARGUMENT, hang);
  json *row = jat(jget(jget(gpu, "nvlink"), "errors"), (int)link);
  json *v = jat(row, counter);
  *value = v && v->type == J_NUM ? (unsigned long long)v->num : 0;
  return leave(rc, hang);
}
#endif

/* ------------------------------------------------------------------ fields, InfoROM */
#ifndef OMIT_nvmlDeviceGetFieldValues
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
  DEV_BEGIN("nvmlDeviceGetFieldValues");
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  for (int i = 0; i < valuesCount; i++) {
    nvmlFieldValue_t *f = &values[i];
    f->timestamp = (long long)now.tv_sec * 1000000 + now.tv_nsec / 1000;
    f->latencyUsec = 0;
    f->value.ullVal = 0;
    if (f->fieldId == FI_DEV_GET_GPU_RECOVERY_ACTION && !jnull(gpu, "recoveryAction")) {
      f->valueType = 1; /* unsigned int */
      f->nvmlReturn = NVML_SUCCESS;
      f->value.uiVal = (unsigned)jnum(gpu, "recoveryAction", 0);
    } else if (f->fieldId == FI_DEV_NVLINK_LINK_COUNT && nvlink_links(gpu) > 0 && !jnull(jget(gpu, "nvlink"), "linkCountField")) {
      f->valueType = 1;
      f->nvmlReturn = NVML_SUCCESS;
      f->value.uiVal = (unsigned)nvlink_links(gpu);
    } else {
      f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
  }
  return leave(rc, hang);
}
#endif

#ifndef OMIT_nvmlDeviceValidateInforom
nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device) {
  DEV_BEGIN("nvmlDeviceValidateInforom");
  if (jnull(gpu, "inforomValid")) return leave(NVML_ERROR_NOT_SUPPORTED, hang);
  return leave(jnum(gpu, "inforomValid", 1) ? NVML_SUCCESS : NVML_ERROR_CORRUPTED_INFOROM, hang);
}
#endif
