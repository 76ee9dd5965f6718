//! The Prometheus exporter behind `vramdoc serve`, in two parts that share only [`Latest`]:
//! [`collect`], a collector thread that reads the machine on its own cadence through the scan
//! engine ([`crate::scan`], the same inventory and diagnosis as `vramdoc scan`) and keeps the
//! rendered exposition; and [`http`], a small HTTP/1.1 server that answers `GET /metrics` and
//! `GET /healthz` from that copy. Any number of scrapers never multiply the driver's
//! process-list cost, and a slow client never blocks a collection.

pub mod collect;
pub mod http;

pub use collect::{collect, collect_exposition, CollectConfig, Collected, Collector, Latest};
pub use http::{route, Response, Server, ServerConfig};
