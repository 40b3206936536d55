//! libfabric, opened at run time with libloading: does its `efa` provider offer a reliable-datagram endpoint
//! (`FI_EP_RDM`), and with `FI_HMEM` (GPU memory) where GPUs are present? That is what aws-ofi-nccl asks for
//! before NCCL uses EFA; without it NCCL falls back to TCP sockets. No verdicts here.
//!
//! ABI (libfabric 1.x `include/rdma/fabric.h`, unchanged in its prefix since 1.5 and kept by 2.x's
//! `libfabric.so.1`): `fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
//! const struct fi_info *hints, struct fi_info **info)`, `fi_freeinfo`, `fi_dupinfo` (`fi_allocinfo()` is an
//! inline `fi_dupinfo(NULL)` there, not a symbol), `fi_version`, `fi_strerror`. The hints are allocated by the
//! library itself (`fi_dupinfo(NULL)`), so only the leading fields this file reads or writes are declared.

use std::ffi::{c_char, c_int, c_void, CStr};

use serde::{Deserialize, Serialize};

use crate::child::breadcrumb;

/// The SONAME, the development link, and where AWS's EFA installer puts it (not on the default loader path:
/// aws-ofi-nccl finds it through its rpath).
pub const LIB_CANDIDATES: [&str; 4] = [
    "libfabric.so.1",
    "libfabric.so",
    "/opt/amazon/efa/lib/libfabric.so.1",
    "/opt/amazon/efa/lib64/libfabric.so.1",
];
/// Vendor-answer key of the query.
pub const EFA_QUERY_KEY: &str = "libfabric.efa";

const FI_EP_RDM: c_int = 3;
const FI_MSG: u64 = 1 << 1;
const FI_RMA: u64 = 1 << 2;
const FI_HMEM: u64 = 1 << 47;
const FI_CONTEXT: u64 = 1 << 59;
const FI_CONTEXT2: u64 = 1 << 52;
// What aws-ofi-nccl accepts as memory-registration modes; a provider needing any of them is still offered.
const FI_MR_LOCAL: c_int = 1 << 2;
const FI_MR_VIRT_ADDR: c_int = 1 << 4;
const FI_MR_ALLOCATED: c_int = 1 << 5;
const FI_MR_PROV_KEY: c_int = 1 << 6;
const FI_MR_HMEM: c_int = 1 << 10;
/// `-FI_ENODATA`: no provider matches the hints.
pub const FI_ENODATA: i32 = -61;

#[repr(C)]
struct FiInfo {
    next: *mut FiInfo,
    caps: u64,
    mode: u64,
    addr_format: u32,
    src_addrlen: usize,
    dest_addrlen: usize,
    src_addr: *mut c_void,
    dest_addr: *mut c_void,
    handle: *mut c_void,
    tx_attr: *mut c_void,
    rx_attr: *mut c_void,
    ep_attr: *mut FiEpAttr,
    domain_attr: *mut FiDomainAttr,
    fabric_attr: *mut FiFabricAttr,
}

#[repr(C)]
struct FiEpAttr {
    ep_type: c_int,
}

#[repr(C)]
struct FiDomainAttr {
    domain: *mut c_void,
    name: *mut c_char,
    threading: c_int,
    control_progress: c_int,
    data_progress: c_int,
    resource_mgmt: c_int,
    av_type: c_int,
    mr_mode: c_int,
}

#[repr(C)]
struct FiFabricAttr {
    fabric: *mut c_void,
    name: *mut c_char,
    prov_name: *mut c_char,
}

type GetInfo = unsafe extern "C" fn(
    u32,
    *const c_char,
    *const c_char,
    u64,
    *const FiInfo,
    *mut *mut FiInfo,
) -> c_int;
type FreeInfo = unsafe extern "C" fn(*mut FiInfo);
type DupInfo = unsafe extern "C" fn(*const FiInfo) -> *mut FiInfo;
type Version = unsafe extern "C" fn() -> u32;
type StrError = unsafe extern "C" fn(c_int) -> *const c_char;

/// One `fi_info` the provider returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// `efa-direct` or `efa` (fabric name).
    pub fabric: String,
    /// `rdmap79s0-rdm`: the EFA device the endpoint runs on.
    pub domain: String,
    pub provider: String,
}

/// A failed `fi_getinfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetInfoError {
    /// The negative `FI_E*` code.
    pub code: i32,
    pub text: String,
}

/// What libfabric said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Query {
    /// The library's version (`1.22`), or why it could not be loaded or lacks a symbol.
    pub library: Result<String, String>,
    /// Whether `FI_HMEM` was asked for (GPUs present).
    pub hmem_requested: bool,
    /// What the query returned; empty when it failed.
    pub providers: Vec<Offer>,
    pub error: Option<GetInfoError>,
    /// With `FI_HMEM` refused: what the same query without it returns (the provider is there, GPU memory is not
    /// offered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub without_hmem: Option<Vec<Offer>>,
}

struct Fabric {
    _lib: libloading::Library,
    getinfo: GetInfo,
    freeinfo: FreeInfo,
    dupinfo: DupInfo,
    version: Version,
    strerror: Option<StrError>,
}

fn load() -> Result<Fabric, String> {
    let mut tried = Vec::new();
    for name in LIB_CANDIDATES {
        breadcrumb("dlopen libfabric");
        // SAFETY: loading libfabric runs its constructors, which only register providers.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => {
                // SAFETY: the signatures are those of fabric.h (see the module comment).
                unsafe {
                    let sym = |n: &[u8]| -> Result<*const c_void, String> {
                        lib.get::<*const c_void>(n)
                            .map(|s| *s)
                            .map_err(|e| format!("{name}: {e}"))
                    };
                    let getinfo: GetInfo = std::mem::transmute(sym(b"fi_getinfo\0")?);
                    let freeinfo: FreeInfo = std::mem::transmute(sym(b"fi_freeinfo\0")?);
                    let dupinfo: DupInfo = std::mem::transmute(sym(b"fi_dupinfo\0")?);
                    let version: Version = std::mem::transmute(sym(b"fi_version\0")?);
                    let strerror = sym(b"fi_strerror\0")
                        .ok()
                        .map(|p| std::mem::transmute::<*const c_void, StrError>(p));
                    return Ok(Fabric {
                        _lib: lib,
                        getinfo,
                        freeinfo,
                        dupinfo,
                        version,
                        strerror,
                    });
                }
            }
            Err(e) => tried.push(format!("{name}: {e}")),
        }
    }
    Err(format!("libfabric not found ({})", tried.join("; ")))
}

/// Asks libfabric for provider `efa` with `FI_EP_RDM` (and `FI_HMEM` when `hmem`).
pub fn query_efa(hmem: bool) -> Query {
    let fabric = match load() {
        Ok(f) => f,
        Err(e) => {
            return Query {
                library: Err(e),
                hmem_requested: hmem,
                providers: vec![],
                error: None,
                without_hmem: None,
            }
        }
    };
    // SAFETY: fi_version takes nothing and returns the library's API version.
    let version = unsafe { (fabric.version)() };
    let mut query = Query {
        library: Ok(format!("{}.{}", version >> 16, version & 0xffff)),
        hmem_requested: hmem,
        providers: vec![],
        error: None,
        without_hmem: None,
    };
    match getinfo(&fabric, version, hmem) {
        Ok(offers) => query.providers = offers,
        Err(e) => {
            // Whatever refused FI_HMEM, the plain answer tells "no provider" from "no GPU memory" (and serves
            // nodes without GPUs, which need no FI_HMEM).
            if hmem {
                query.without_hmem = Some(getinfo(&fabric, version, false).unwrap_or_default());
            }
            query.error = Some(e);
        }
    }
    query
}

fn getinfo(fabric: &Fabric, version: u32, hmem: bool) -> Result<Vec<Offer>, GetInfoError> {
    // SAFETY: the hints come from the library's own allocator and are freed by it; only fields of the stable
    // prefix are written, strings through strdup (fi_freeinfo frees them).
    unsafe {
        let hints = (fabric.dupinfo)(std::ptr::null());
        if hints.is_null() {
            return Err(GetInfoError {
                code: -12,
                text: "fi_dupinfo(NULL) returned NULL".into(),
            });
        }
        let h = &mut *hints;
        h.caps = FI_MSG | FI_RMA | if hmem { FI_HMEM } else { 0 };
        h.mode = FI_CONTEXT | FI_CONTEXT2;
        if !h.ep_attr.is_null() {
            (*h.ep_attr).ep_type = FI_EP_RDM;
        }
        if !h.domain_attr.is_null() {
            (*h.domain_attr).mr_mode = FI_MR_LOCAL
                | FI_MR_VIRT_ADDR
                | FI_MR_ALLOCATED
                | FI_MR_PROV_KEY
                | if hmem { FI_MR_HMEM } else { 0 };
        }
        if !h.fabric_attr.is_null() {
            (*h.fabric_attr).prov_name = libc::strdup(c"efa".as_ptr());
        }
        let mut info: *mut FiInfo = std::ptr::null_mut();
        breadcrumb("fi_getinfo");
        let rc = (fabric.getinfo)(
            version,
            std::ptr::null(),
            std::ptr::null(),
            0,
            hints,
            &mut info,
        );
        (fabric.freeinfo)(hints);
        if rc != 0 {
            let text = fabric
                .strerror
                .map(|f| f(-rc))
                .filter(|p| !p.is_null())
                .map(|p| CStr::from_ptr(p).to_string_lossy().into_owned())
                .unwrap_or_else(|| std::io::Error::from_raw_os_error(-rc).to_string());
            return Err(GetInfoError { code: rc, text });
        }
        let mut offers = Vec::new();
        let mut cur = info;
        while !cur.is_null() && offers.len() < 1024 {
            let i = &*cur;
            let text = |p: *mut c_char| {
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                }
            };
            let (fabric_name, provider) = if i.fabric_attr.is_null() {
                (String::new(), String::new())
            } else {
                (
                    text((*i.fabric_attr).name),
                    text((*i.fabric_attr).prov_name),
                )
            };
            let domain = if i.domain_attr.is_null() {
                String::new()
            } else {
                text((*i.domain_attr).name)
            };
            offers.push(Offer {
                fabric: fabric_name,
                domain,
                provider,
            });
            cur = i.next;
        }
        if !info.is_null() {
            (fabric.freeinfo)(info);
        }
        if offers.is_empty() {
            return Err(GetInfoError {
                code: FI_ENODATA,
                text: "fi_getinfo returned success and an empty list".into(),
            });
        }
        Ok(offers)
    }
}

impl Query {
    /// The distinct EFA devices the offers run on (`rdmap79s0` from `rdmap79s0-rdm`), sorted.
    pub fn devices(offers: &[Offer]) -> Vec<String> {
        let mut d: Vec<String> = offers
            .iter()
            .map(|o| {
                o.domain
                    .strip_suffix("-rdm")
                    .or_else(|| o.domain.strip_suffix("-dgrm"))
                    .unwrap_or(&o.domain)
                    .to_string()
            })
            .filter(|d| !d.is_empty())
            .collect();
        d.sort_by(|a, b| crate::sysfs::infiniband::natural_cmp(a, b));
        d.dedup();
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_library_is_said_not_panicked() {
        // The build machine has no libfabric: the query says so with every name tried.
        let q = query_efa(true);
        if let Err(e) = &q.library {
            assert!(e.contains("libfabric.so.1"), "{e}");
            assert!(q.providers.is_empty() && q.error.is_none());
        }
    }

    #[test]
    fn devices_from_domains() {
        let o = |d: &str| Offer {
            fabric: "efa".into(),
            domain: d.into(),
            provider: "efa".into(),
        };
        assert_eq!(
            Query::devices(&[o("rdmap10s0-rdm"), o("rdmap9s0-rdm"), o("rdmap9s0-rdm")]),
            vec!["rdmap9s0", "rdmap10s0"]
        );
    }
}
