//! The keys the simulated libcuda counts in its per-client file, and their reading: a call
//! of an entry point, a failing result of one, an entry point or export table a client asked
//! for that the simulated driver does not serve, and a slot of a served export table the
//! simulator has no behaviour for. A CUDA runtime that stops on the box says here why.
//!
//! Keys are short (a slot holds 55 bytes): `NAME` counts calls, `NAME!CODE` failing results
//! (`CODE` the decimal `CUresult`), `?NAME@VERSION` a name `cuGetProcAddress` could not
//! serve at that version, `?table:UUID` an unknown `cuGetExportTable` id, `?slot:UUID:N`
//! a slot of a served table without behaviour.

use super::ClientCalls;
use std::collections::BTreeMap;

/// Key of one call of `name`.
pub fn call_key(name: &str) -> String {
    name.to_string()
}

/// Key of a call of `name` that returned the failing `code`.
pub fn failure_key(name: &str, code: u32) -> String {
    format!("{name}!{code}")
}

/// Key of a name `cuGetProcAddress` was asked for at `version` and could not serve.
pub fn missing_key(name: &str, version: i32) -> String {
    format!("?{name}@{version}")
}

/// Key of an export table id `cuGetExportTable` does not know (32 hex digits).
pub fn missing_table_key(uuid: &[u8; 16]) -> String {
    format!("?table:{}", hex(uuid))
}

/// Key of slot `slot` of the served table `uuid`, called without behaviour.
pub fn unknown_slot_key(uuid: &[u8; 16], slot: usize) -> String {
    format!("?slot:{}:{slot}", hex(uuid))
}

/// Lower-case hex of a UUID's 16 bytes, in their order.
pub fn hex(uuid: &[u8; 16]) -> String {
    uuid.iter().map(|b| format!("{b:02x}")).collect()
}

/// One client's CUDA calls, sorted by kind: the client and its plain calls as NVML's
/// counters read them (`client.calls` holds the calls per entry point only), the other keys
/// taken out into fields of their own.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CudaCalls {
    #[serde(flatten)]
    pub client: ClientCalls,
    /// Failing results per entry point: the cuda.h name of the code and how often.
    pub failed: BTreeMap<String, BTreeMap<String, u64>>,
    /// Entry points asked of `cuGetProcAddress` and not served, with the version asked.
    pub missing_entry_points: Vec<String>,
    /// Export table ids asked of `cuGetExportTable` and not served.
    pub missing_export_tables: Vec<String>,
    /// Slots of served export tables called without behaviour (`UUID:slot`).
    pub unknown_slots: Vec<String>,
}

impl CudaCalls {
    /// Calls counted, every entry point together.
    pub fn total(&self) -> u64 {
        self.client.total()
    }

    /// Failing results counted, every entry point together.
    pub fn failures(&self) -> u64 {
        self.failed.values().flat_map(|m| m.values()).sum()
    }
}

impl From<ClientCalls> for CudaCalls {
    fn from(mut client: ClientCalls) -> CudaCalls {
        let keys = std::mem::take(&mut client.calls);
        let mut out = CudaCalls {
            client,
            failed: BTreeMap::new(),
            missing_entry_points: Vec::new(),
            missing_export_tables: Vec::new(),
            unknown_slots: Vec::new(),
        };
        for (key, n) in keys {
            if let Some(t) = key.strip_prefix("?table:") {
                out.missing_export_tables.push(t.to_string());
            } else if let Some(s) = key.strip_prefix("?slot:") {
                out.unknown_slots.push(s.to_string());
            } else if let Some(m) = key.strip_prefix('?') {
                out.missing_entry_points.push(m.to_string());
            } else if let Some((name, code)) = key.split_once('!') {
                let label = code
                    .parse::<u32>()
                    .ok()
                    .and_then(crate::codes::cuda::name_of)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("CUresult {code}"));
                *out.failed
                    .entry(name.to_string())
                    .or_default()
                    .entry(label)
                    .or_insert(0) += n;
            } else {
                out.client.calls.insert(key, n);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::{read_all_cuda, Counter};

    #[test]
    fn keys_read_back_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let mut c = Counter::open_cuda(dir.path(), me, me).unwrap();
        c.count(&call_key("cuMemAlloc_v2"));
        c.count(&call_key("cuMemAlloc_v2"));
        c.count(&failure_key("cuMemAlloc_v2", 2));
        c.count(&missing_key("cuGraphAddNode", 12030));
        let id = [0x6b_u8; 16];
        c.count(&missing_table_key(&id));
        c.count(&unknown_slot_key(&id, 4));
        let all = read_all_cuda(dir.path()).unwrap();
        assert_eq!(all.len(), 1);
        let got = &all[0];
        assert_eq!(got.client.calls["cuMemAlloc_v2"], 2);
        assert_eq!(got.total(), 2);
        assert_eq!(got.failed["cuMemAlloc_v2"]["CUDA_ERROR_OUT_OF_MEMORY"], 1);
        assert_eq!(got.failures(), 1);
        assert_eq!(got.missing_entry_points, vec!["cuGraphAddNode@12030"]);
        assert_eq!(got.missing_export_tables, vec![hex(&id)]);
        assert_eq!(got.unknown_slots, vec![format!("{}:4", hex(&id))]);
        // NVML's counters are another directory: none here.
        assert!(crate::calls::read_all(dir.path()).unwrap().is_empty());
    }
}
