//! Errors: Kafka's numeric error codes as the broker answers them, and transport failures.

use std::fmt;
use std::time::Duration;

/// Kafka's error codes that this client acts on (the broker answers every code Kafka has).
pub mod codes {
    /// No error.
    pub const NONE: i32 = 0;
    /// The fetch offset is below the log start or past the log end.
    pub const OFFSET_OUT_OF_RANGE: i32 = 1;
    /// The topic or partition does not exist (yet: metadata may be catching up).
    pub const UNKNOWN_TOPIC_OR_PARTITION: i32 = 3;
    /// The partition has no leader right now (an election is under way).
    pub const LEADER_NOT_AVAILABLE: i32 = 5;
    /// The broker asked does not lead the partition.
    pub const NOT_LEADER_OR_FOLLOWER: i32 = 6;
    /// acks=all: the in-sync replicas did not confirm in time.
    pub const REQUEST_TIMED_OUT: i32 = 7;
    /// The group's coordinator is loading its state.
    pub const COORDINATOR_LOAD_IN_PROGRESS: i32 = 14;
    /// The group's coordinator is not available.
    pub const COORDINATOR_NOT_AVAILABLE: i32 = 15;
    /// The broker asked does not coordinate the group.
    pub const NOT_COORDINATOR: i32 = 16;
    /// The member id is not known to the coordinator: join again.
    pub const UNKNOWN_MEMBER_ID: i32 = 25;
    /// A topic of that name exists already.
    pub const TOPIC_ALREADY_EXISTS: i32 = 36;
    /// The broker has no state for the producer's sequence: a gap.
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i32 = 45;
    /// The producer's epoch is older than the broker's.
    pub const INVALID_PRODUCER_EPOCH: i32 = 47;
    /// The broker no longer knows the producer id.
    pub const UNKNOWN_PRODUCER_ID: i32 = 59;
    /// The member's epoch is fenced: join again with epoch 0.
    pub const FENCED_MEMBER_EPOCH: i32 = 110;
    /// The member's epoch is stale: send the heartbeat again.
    pub const STALE_MEMBER_EPOCH: i32 = 113;
}

/// Kafka's name of an error code and whether the operation may be retried (after a
/// metadata refresh for a leadership error), as `lograft.protocol.errors` defines them.
pub fn describe_code(code: i32) -> (&'static str, bool) {
    match code {
        0 => ("NONE", false),
        -1 => ("UNKNOWN_SERVER_ERROR", false),
        1 => ("OFFSET_OUT_OF_RANGE", false),
        2 => ("CORRUPT_MESSAGE", true),
        3 => ("UNKNOWN_TOPIC_OR_PARTITION", true),
        5 => ("LEADER_NOT_AVAILABLE", true),
        6 => ("NOT_LEADER_OR_FOLLOWER", true),
        7 => ("REQUEST_TIMED_OUT", true),
        8 => ("BROKER_NOT_AVAILABLE", true),
        10 => ("MESSAGE_TOO_LARGE", false),
        13 => ("NETWORK_EXCEPTION", true),
        14 => ("COORDINATOR_LOAD_IN_PROGRESS", true),
        15 => ("COORDINATOR_NOT_AVAILABLE", true),
        16 => ("NOT_COORDINATOR", true),
        17 => ("INVALID_TOPIC_EXCEPTION", false),
        18 => ("RECORD_LIST_TOO_LARGE", false),
        19 => ("NOT_ENOUGH_REPLICAS", true),
        20 => ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", true),
        21 => ("INVALID_REQUIRED_ACKS", false),
        22 => ("ILLEGAL_GENERATION", false),
        24 => ("INVALID_GROUP_ID", false),
        25 => ("UNKNOWN_MEMBER_ID", false),
        26 => ("INVALID_SESSION_TIMEOUT", false),
        27 => ("REBALANCE_IN_PROGRESS", false),
        32 => ("INVALID_TIMESTAMP", false),
        36 => ("TOPIC_ALREADY_EXISTS", false),
        37 => ("INVALID_PARTITIONS", false),
        38 => ("INVALID_REPLICATION_FACTOR", false),
        40 => ("INVALID_CONFIG", false),
        41 => ("NOT_CONTROLLER", true),
        42 => ("INVALID_REQUEST", false),
        45 => ("OUT_OF_ORDER_SEQUENCE_NUMBER", false),
        46 => ("DUPLICATE_SEQUENCE_NUMBER", false),
        47 => ("INVALID_PRODUCER_EPOCH", false),
        56 => ("KAFKA_STORAGE_ERROR", true),
        59 => ("UNKNOWN_PRODUCER_ID", false),
        69 => ("GROUP_ID_NOT_FOUND", false),
        74 => ("FENCED_LEADER_EPOCH", true),
        75 => ("UNKNOWN_LEADER_EPOCH", true),
        76 => ("UNSUPPORTED_COMPRESSION_TYPE", false),
        83 => ("ELIGIBLE_LEADERS_NOT_AVAILABLE", true),
        87 => ("INVALID_RECORD", false),
        88 => ("UNSTABLE_OFFSET_COMMIT", true),
        100 => ("UNKNOWN_TOPIC_ID", true),
        110 => ("FENCED_MEMBER_EPOCH", false),
        112 => ("UNSUPPORTED_ASSIGNOR", false),
        113 => ("STALE_MEMBER_EPOCH", false),
        _ => ("UNKNOWN_CODE", false),
    }
}

/// A client error.
#[derive(Debug, Clone)]
pub enum Error {
    /// The broker answered a Kafka error code.
    Broker {
        /// Kafka's numeric code.
        code: i32,
        /// Kafka's name of the code, e.g. `NOT_LEADER_OR_FOLLOWER`.
        name: String,
        /// Whether the same request may be sent again (after a metadata refresh).
        retriable: bool,
        /// The broker's explanation.
        message: String,
    },
    /// The call failed in transport: the node is down, unreachable, or did not answer in
    /// time. Retriable: ask another broker for metadata and try again.
    Transport {
        /// The broker address called.
        address: String,
        /// gRPC status code.
        code: tonic::Code,
        /// What went wrong.
        message: String,
    },
    /// A gRPC status the client does not retry: a malformed request, a message over the
    /// size limit (`RESOURCE_EXHAUSTED`), an exception in the server (`UNKNOWN`).
    Rpc {
        /// gRPC status code.
        code: tonic::Code,
        /// The status message.
        message: String,
    },
    /// A retriable operation did not succeed before its deadline; `last` is the last error.
    TimedOut {
        /// What was attempted.
        what: String,
        /// How long it was tried.
        after: Duration,
        /// The last error seen.
        last: Box<Error>,
    },
    /// The cluster answered something the client cannot use (no such topic, no brokers...).
    Invalid(String),
}

impl Error {
    /// An error from a Kafka error code in an answer (name and retriability from the table
    /// when the answer does not carry them).
    pub fn from_code(code: i32, message: impl Into<String>) -> Self {
        let (name, retriable) = describe_code(code);
        Error::Broker {
            code,
            name: name.to_string(),
            retriable,
            message: message.into(),
        }
    }

    /// From a gRPC status returned by a call to `address`.
    ///
    /// Retriable ([`Error::Transport`]): `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `CANCELLED`,
    /// `ABORTED`, and an `UNKNOWN` that tonic made up from a local transport failure (a
    /// connection reset by a node that died mid-call: such a status has a `source`). Not
    /// retriable ([`Error::Rpc`]): every other status, among them `RESOURCE_EXHAUSTED` (a
    /// message over the size limit: the same request fails again) and an `UNKNOWN` the
    /// server sent (an exception in its handler).
    pub fn from_status(address: &str, status: &tonic::Status) -> Self {
        let transport = match status.code() {
            tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Cancelled
            | tonic::Code::Aborted => true,
            tonic::Code::Unknown => std::error::Error::source(status).is_some(),
            _ => false,
        };
        if transport {
            Error::Transport {
                address: address.to_string(),
                code: status.code(),
                message: status.message().to_string(),
            }
        } else {
            Error::Rpc {
                code: status.code(),
                message: status.message().to_string(),
            }
        }
    }

    /// Whether the operation may be tried again (after refreshing metadata).
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Broker { retriable, .. } => *retriable,
            Error::Transport { .. } => true,
            Error::Rpc { .. } | Error::TimedOut { .. } | Error::Invalid(_) => false,
        }
    }

    /// The Kafka error code, when the broker answered one.
    pub fn code(&self) -> Option<i32> {
        match self {
            Error::Broker { code, .. } => Some(*code),
            Error::TimedOut { last, .. } => last.code(),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Broker {
                code,
                name,
                message,
                ..
            } => write!(f, "{name} ({code}): {message}"),
            Error::Transport {
                address,
                code,
                message,
            } => write!(f, "{address}: gRPC {code:?}: {message}"),
            Error::Rpc { code, message } => write!(f, "gRPC {code:?}: {message}"),
            Error::TimedOut { what, after, last } => {
                write!(f, "{what} timed out after {after:?}; last error: {last}")
            }
            Error::Invalid(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Error {}

/// This crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    fn retriable(status: tonic::Status) -> bool {
        Error::from_status("node:9092", &status).is_retriable()
    }

    #[test]
    fn transport_statuses_are_retriable() {
        assert!(retriable(tonic::Status::unavailable("node down")));
        assert!(retriable(tonic::Status::deadline_exceeded("slow")));
        assert!(retriable(tonic::Status::cancelled("reset")));
        assert!(retriable(tonic::Status::aborted("aborted")));
        // What tonic makes of a connection that broke under a call: UNKNOWN with a source.
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let status = tonic::Status::from_error(Box::new(reset));
        assert_eq!(status.code(), tonic::Code::Unknown);
        assert!(retriable(status));
    }

    #[test]
    fn a_message_too_large_or_a_server_exception_fails_at_once() {
        assert!(!retriable(tonic::Status::resource_exhausted(
            "Received message larger than max"
        )));
        // The server's UNKNOWN (an exception in its handler) carries no source.
        assert!(!retriable(tonic::Status::unknown(
            "Unexpected <class 'KeyError'>"
        )));
        assert!(!retriable(tonic::Status::invalid_argument("bad")));
        assert!(!retriable(tonic::Status::internal("h2 protocol error")));
    }
}
