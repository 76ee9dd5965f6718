//! The Prometheus exporter behind `vramdoc serve`, in two parts that share only [`Latest`]:
//! [`collect`], a collector thread that reads the machine on its own cadence through the scan
//! engine ([`crate::scan`], the same inventory and diagnosis as `vramdoc scan`) and keeps the
//! rendered exposition, keeping NVML open, re-opening it after repeated failures or for every
//! collection (`--release-between`); and [`http`], an HTTP/1.1 server (hyper) that answers
//! `/metrics` and `/healthz` from that copy under per-connection deadlines, over TLS and behind
//! basic authentication when a [`webconfig`] file says so. Any number of
//! scrapers never multiply the driver's process-list cost, and a slow client never blocks a
//! collection or another scrape.

pub mod collect;
pub mod http;
pub mod preflight_gauge;
pub mod webconfig;

pub use collect::{
    collect, collect_exposition, failed_exposition, CollectConfig, Collected, Collector,
    CollectorOptions, HealthPolicy, Latest, OpenMonitor, FAILURES_BEFORE_REINIT,
};
pub use http::{route, Response, Server, ServerConfig};

/// The node's name in the exposition: `--node-name`, else `NODE_NAME` (the DaemonSet's
/// downward API), else the host name (`/proc/sys/kernel/hostname`), else `unknown`; a name
/// that is empty, longer than 253 bytes or not printable ASCII is passed over.
pub fn node_name(flag: Option<&str>) -> String {
    if let Some(n) = flag {
        return n.to_string();
    }
    let printable =
        |s: &str| !s.is_empty() && s.len() <= 253 && s.bytes().all(|b| b.is_ascii_graphic());
    if let Some(n) = std::env::var("NODE_NAME").ok().filter(|n| printable(n)) {
        return n;
    }
    match crate::host::hostname() {
        Ok(h) if printable(&h) => h,
        _ => "unknown".into(),
    }
}
