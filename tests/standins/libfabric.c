/* A stand-in libfabric.so.1 with the entry points of libfabric 1.x's ABI (include/rdma/fabric.h):
 * fi_version, fi_getinfo, fi_freeinfo, fi_dupinfo (fi_allocinfo() is an inline fi_dupinfo(NULL) there) and
 * fi_strerror. The structures are declared in full up to the fields fabric-preflight reads, with the real
 * layout; what fi_getinfo answers is chosen by STANDIN_FI:
 *   efa      one efa FI_EP_RDM offer per device named in STANDIN_FI_DEVICES (comma-separated), FI_HMEM or not
 *   none     -FI_ENODATA for every query (no efa provider)
 *   nohmem   -FI_ENODATA when FI_HMEM is asked for, else the offers
 * and the hints it was given are checked: provider "efa", FI_EP_RDM, or it answers -FI_EINVAL. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#define FI_HMEM (1ULL << 47)
#define FI_EP_RDM 3
#define FI_ENODATA 61
#define FI_EINVAL 22

struct fi_ep_attr { int type; uint32_t protocol; uint32_t protocol_version; size_t max_msg_size; };
struct fi_domain_attr { void *domain; char *name; int threading, control_progress, data_progress, resource_mgmt,
                        av_type, mr_mode; };
struct fi_fabric_attr { void *fabric; char *name; char *prov_name; uint32_t prov_version; uint32_t api_version; };
struct fi_info {
    struct fi_info *next; uint64_t caps; uint64_t mode; uint32_t addr_format; size_t src_addrlen;
    size_t dest_addrlen; void *src_addr; void *dest_addr; void *handle; void *tx_attr; void *rx_attr;
    struct fi_ep_attr *ep_attr; struct fi_domain_attr *domain_attr; struct fi_fabric_attr *fabric_attr; void *nic;
};

uint32_t fi_version(void) { return (1u << 16) | 22u; }

const char *fi_strerror(int errnum) {
    return errnum == FI_ENODATA ? "No data available" : errnum == FI_EINVAL ? "Invalid argument" : "Unknown error";
}

struct fi_info *fi_dupinfo(const struct fi_info *info) {
    struct fi_info *i = calloc(1, sizeof *i);
    i->ep_attr = calloc(1, sizeof *i->ep_attr);
    i->domain_attr = calloc(1, sizeof *i->domain_attr);
    i->fabric_attr = calloc(1, sizeof *i->fabric_attr);
    if (info) {
        i->caps = info->caps;
        i->mode = info->mode;
        i->ep_attr->type = info->ep_attr ? info->ep_attr->type : 0;
        if (info->domain_attr && info->domain_attr->name) i->domain_attr->name = strdup(info->domain_attr->name);
        if (info->fabric_attr && info->fabric_attr->name) i->fabric_attr->name = strdup(info->fabric_attr->name);
        if (info->fabric_attr && info->fabric_attr->prov_name)
            i->fabric_attr->prov_name = strdup(info->fabric_attr->prov_name);
    }
    return i;
}

void fi_freeinfo(struct fi_info *info) {
    while (info) {
        struct fi_info *next = info->next;
        free(info->domain_attr->name);
        free(info->fabric_attr->name);
        free(info->fabric_attr->prov_name);
        free(info->ep_attr);
        free(info->domain_attr);
        free(info->fabric_attr);
        free(info);
        info = next;
    }
}

static struct fi_info *offer(const char *domain, uint64_t caps, struct fi_info *next) {
    struct fi_info *i = fi_dupinfo(NULL);
    i->caps = caps;
    i->ep_attr->type = FI_EP_RDM;
    i->domain_attr->name = strdup(domain);
    i->fabric_attr->name = strdup("efa-direct");
    i->fabric_attr->prov_name = strdup("efa");
    i->next = next;
    return i;
}

int fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
               const struct fi_info *hints, struct fi_info **info) {
    const char *mode = getenv("STANDIN_FI");
    *info = NULL;
    if (!hints || !hints->ep_attr || hints->ep_attr->type != FI_EP_RDM || !hints->fabric_attr ||
        !hints->fabric_attr->prov_name || strcmp(hints->fabric_attr->prov_name, "efa") != 0 ||
        version != fi_version())
        return -FI_EINVAL;
    if (!mode || strcmp(mode, "none") == 0) return -FI_ENODATA;
    if (strcmp(mode, "nohmem") == 0 && (hints->caps & FI_HMEM)) return -FI_ENODATA;
    const char *devices = getenv("STANDIN_FI_DEVICES");
    char *list = strdup(devices ? devices : "rdmap68s0"), *save = NULL;
    struct fi_info *head = NULL, **tail = &head;
    for (char *d = strtok_r(list, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
        char domain[256];
        strncpy(domain, d, sizeof domain - 8);
        domain[sizeof domain - 8] = 0;
        strcat(domain, "-rdm");
        *tail = offer(domain, hints->caps, NULL);
        tail = &(*tail)->next;
    }
    free(list);
    *info = head;
    return head ? 0 : -FI_ENODATA;
}
