/* A stand-in libibverbs.so.1 for an EFA node: it lists two EFA devices (rdmap68s0, rdmap69s0: aws-p5en's first
 * two) and refuses what an RC transfer needs: opening a device for it fails with EOPNOTSUPP, the errno the efa
 * driver gives `ibv_create_qp(IBV_QPT_RC)`. A check that tried RC on EFA would fail on it; the RC checks must
 * not get that far. */
#include <errno.h>
#include <stdlib.h>
static int dev[2];
void **ibv_get_device_list(int *n) {
    void **l = calloc(3, sizeof(void *));
    l[0] = &dev[0]; l[1] = &dev[1];
    if (n) *n = 2;
    return l;
}
void ibv_free_device_list(void **l) { free(l); }
const char *ibv_get_device_name(void *d) { return d == &dev[0] ? "rdmap68s0" : "rdmap69s0"; }
void *ibv_open_device(void *d) { errno = EOPNOTSUPP; return NULL; }
void *ibv_create_qp(void *pd, void *attr) { errno = EOPNOTSUPP; return NULL; }
