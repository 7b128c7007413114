//! An idempotent producer's sequence bookkeeping for one partition.
//!
//! The broker remembers, per partition and producer id, the sequence numbers it appended: a
//! request whose `base_sequence` it has seen is a retry and is answered with the offsets the
//! records were first given; a gap is `OUT_OF_ORDER_SEQUENCE_NUMBER`. So a request gets its
//! base sequence once ([`PartitionSequence::reserve`]) and every retry of it sends that same
//! value. The sequence of the next request is the previous base plus its record count,
//! wrapping from `i32::MAX` to 0 as Kafka's does.
//!
//! A request that fails for good leaves the partition in doubt (its records may or may not
//! be in the log). Sending the next records with the following sequence would be wrong either
//! way, so the partition starts over under a new producer id
//! ([`PartitionSequence::restart`]): sequence 0 of a new id is never taken for a retry.

use crate::pb;

/// The producer id and epoch from `InitProducerId`, and the next sequence in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSequence {
    producer_id: i64,
    producer_epoch: i32,
    next_sequence: i32,
}

/// `sequence + count`, wrapping past `i32::MAX` to 0 (Kafka's `DefaultRecordBatch.incrementSequence`).
pub fn increment_sequence(sequence: i32, count: i32) -> i32 {
    if sequence > i32::MAX - count {
        count - (i32::MAX - sequence) - 1
    } else {
        sequence + count
    }
}

impl PartitionSequence {
    /// A partition not yet written by this producer id: sequence 0 next.
    pub fn new(producer_id: i64, producer_epoch: i32) -> Self {
        PartitionSequence {
            producer_id,
            producer_epoch,
            next_sequence: 0,
        }
    }

    /// The producer id.
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    /// The sequence the next request starts at.
    pub fn next_sequence(&self) -> i32 {
        self.next_sequence
    }

    /// The `ProducerSequence` of a new request of `count` records (sent as is by every retry
    /// of that request); the next request starts after it.
    pub fn reserve(&mut self, count: usize) -> pb::ProducerSequence {
        assert!(count > 0, "a request carries at least one record");
        let count = i32::try_from(count).expect("record count fits in an i32");
        let base = self.next_sequence;
        self.next_sequence = increment_sequence(base, count);
        pb::ProducerSequence {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: base,
        }
    }

    /// Start over under a new producer id (after a request failed for good).
    pub fn restart(&mut self, producer_id: i64, producer_epoch: i32) {
        *self = PartitionSequence::new(producer_id, producer_epoch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_grow_by_the_record_count_of_each_request() {
        let mut seq = PartitionSequence::new(7, 0);
        let first = seq.reserve(3);
        assert_eq!(
            (first.producer_id, first.producer_epoch, first.base_sequence),
            (7, 0, 0)
        );
        assert_eq!(seq.reserve(1).base_sequence, 3);
        assert_eq!(seq.reserve(10).base_sequence, 4);
        assert_eq!(seq.next_sequence(), 14);
    }

    #[test]
    fn a_retry_resends_the_reserved_sequence() {
        let mut seq = PartitionSequence::new(7, 0);
        let request = seq.reserve(5);
        // Retries clone the request: the bookkeeping does not move until the next reserve.
        let retry = request;
        assert_eq!(retry.base_sequence, 0);
        assert_eq!(seq.reserve(1).base_sequence, 5);
    }

    #[test]
    fn sequences_wrap_like_kafka() {
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(increment_sequence(5, 3), 8);
        let mut seq = PartitionSequence {
            producer_id: 1,
            producer_epoch: 0,
            next_sequence: i32::MAX - 1,
        };
        assert_eq!(seq.reserve(2).base_sequence, i32::MAX - 1);
        assert_eq!(seq.next_sequence(), 0);
    }

    #[test]
    fn restart_takes_the_new_id_from_sequence_zero() {
        let mut seq = PartitionSequence::new(7, 0);
        seq.reserve(4);
        seq.restart(8, 0);
        assert_eq!(seq.producer_id(), 8);
        let next = seq.reserve(1);
        assert_eq!((next.producer_id, next.base_sequence), (8, 0));
    }
}
