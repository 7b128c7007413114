//! A Rust client for lograft (a replicated commit log built like Kafka in KRaft mode), over
//! its gRPC API `lograft.v1.Broker` (`proto/broker.proto`).
//!
//! - [`Admin`]: create topics, list and describe them (`CreateTopics`, `Metadata`).
//! - [`Producer`]: `ProduceRecords` to each partition's leader; Kafka's partitioner
//!   (murmur2 of the key), retries with metadata refresh, idempotence (`InitProducerId` and
//!   per-partition sequences) so a retry after a lost answer or a leader's death writes a
//!   record once; [`Producer::send_batch`] for many records in one call.
//! - [`Consumer`]: `FetchRecords` from hand-assigned partitions or as a member of a
//!   consumer group (KIP-848 `ConsumerGroupHeartbeat`, `OffsetFetch`, `OffsetCommit`).
//!
//! Every call is async (tokio). See `README.md` beside this crate for a walk-through.

pub mod admin;
pub mod cluster;
pub mod consumer;
pub mod error;
pub mod partitioner;
pub mod producer;
pub mod sequence;

/// The generated gRPC client and messages of `lograft.v1` (`proto/broker.proto`).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("lograft.v1");
}

pub use admin::Admin;
pub use cluster::{BrokerInfo, Cluster, PartitionInfo, TopicInfo};
pub use consumer::{Consumer, ConsumerConfig, ConsumerRecord, Offset, TopicPartition};
pub use error::{Error, Result};
pub use producer::{Producer, ProducerConfig, Record, RecordMetadata};

/// A record header: its key and its value (`None`: a null value).
pub type Header = (String, Option<Vec<u8>>);

/// Whether `LOGRAFT_RS_DEBUG` asks for the client's debug lines on stderr.
pub fn debug_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var_os("LOGRAFT_RS_DEBUG").is_some_and(|v| v != "0"))
}

/// A debug line on stderr when `LOGRAFT_RS_DEBUG` is set (retries, coordinator moves,
/// assignments); silent otherwise.
#[macro_export]
#[doc(hidden)]
macro_rules! debug {
    ($($arg:tt)*) => {
        if $crate::debug_enabled() {
            eprintln!("lograft-rs: {}", format!($($arg)*));
        }
    };
}

/// A warning on stderr, whether or not `LOGRAFT_RS_DEBUG` is set: something the application
/// did not see fail but should know of (a revoked partition's commit that failed).
#[macro_export]
#[doc(hidden)]
macro_rules! warning {
    ($($arg:tt)*) => {
        eprintln!("lograft-rs: warning: {}", format!($($arg)*));
    };
}
