//! The producer: `ProduceRecords` to each partition's leader, with retries and idempotence.
//!
//! Every partition has one task that sends its requests one at a time (Kafka's
//! `max.in.flight.requests.per.connection=1`): records handed to [`Producer::send`] while a
//! request is out are sent together in the next one, so many concurrent `send`s make large
//! requests, up to `max_batch_records` records and `batch_size` bytes (a request always takes
//! at least one `send` or `send_batch`, whatever its size). A request is retried, unchanged,
//! after a retriable error (a leadership error refreshes the metadata first; a connection
//! failure asks another broker) until `delivery_timeout` has passed. With idempotence every
//! request carries the producer id and the sequence of its first record (see
//! [`crate::sequence`]), so a retry of a request whose answer was lost is recognised by the
//! leader (old or new) and written once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::cluster::{Backoff, Cluster, Retry};
use crate::error::{Error, Result};
use crate::partitioner::partition_for_key;
use crate::pb;
use crate::sequence::PartitionSequence;
use crate::{debug, Header};

/// What [`Producer`] counts per record toward `batch_size`, besides the key, value and
/// headers: roughly a record's framing in a RecordBatch (lengths, offset and timestamp deltas,
/// attributes) and in the `ProducedRecord` message.
pub const RECORD_OVERHEAD_BYTES: usize = 20;

/// How much longer than `request_timeout` a `ProduceRecords` call's gRPC deadline is: the
/// broker waits up to `timeout_ms` (= `request_timeout`) for the in-sync replicas and then
/// answers `REQUEST_TIMED_OUT`; without the slack the call's deadline would expire first and
/// the client would see `DEADLINE_EXCEEDED` instead of the broker's answer.
pub const PRODUCE_DEADLINE_SLACK: Duration = Duration::from_secs(5);

/// A record to send.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// `None`: a null key (the partition is chosen round-robin).
    pub key: Option<Vec<u8>>,
    /// `None`: a null value (a tombstone on a compacted topic).
    pub value: Option<Vec<u8>>,
    /// Headers, in order.
    pub headers: Vec<Header>,
    /// CreateTime in ms since the epoch; `None`: the broker's clock.
    pub timestamp_ms: Option<i64>,
}

impl Record {
    /// A record with a key and a value and no headers.
    pub fn new(key: Option<&[u8]>, value: Option<&[u8]>) -> Self {
        Record {
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: Vec::new(),
            timestamp_ms: None,
        }
    }

    /// The bytes this record counts for toward `batch_size`: key, value, header keys and
    /// values, plus [`RECORD_OVERHEAD_BYTES`].
    pub fn estimated_size(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(key, value)| key.len() + value.as_ref().map_or(0, Vec::len))
            .sum();
        self.key.as_ref().map_or(0, Vec::len)
            + self.value.as_ref().map_or(0, Vec::len)
            + headers
            + RECORD_OVERHEAD_BYTES
    }

    fn into_pb(self) -> pb::ProducedRecord {
        pb::ProducedRecord {
            key: self.key,
            value: self.value,
            headers: self
                .headers
                .into_iter()
                .map(|(key, value)| pb::RecordHeader { key, value })
                .collect(),
            timestamp_ms: self.timestamp_ms,
        }
    }
}

/// Where a record was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The partition.
    pub partition: i32,
    /// The record's offset in it.
    pub offset: i64,
}

/// Producer settings (Kafka's names in the docs of each field).
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// `bootstrap.servers`: `host:port` of any brokers.
    pub bootstrap: Vec<String>,
    /// `acks`: 0, 1 or -1 (all in-sync replicas).
    pub acks: i32,
    /// `enable.idempotence`: producer id and sequences, so retries write records once.
    pub enable_idempotence: bool,
    /// `delivery.timeout.ms`: how long a record may take, retries included.
    pub delivery_timeout: Duration,
    /// `request.timeout.ms`: how long one request may take.
    pub request_timeout: Duration,
    /// `retry.backoff.ms`: the first wait before a retry (doubling up to the max).
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms`.
    pub retry_backoff_max: Duration,
    /// At most this many records in one request (records sent meanwhile wait for the next).
    pub max_batch_records: usize,
    /// `batch.size`: at most this many bytes of records in one request, each record counted
    /// as [`Record::estimated_size`] (key, value, headers and [`RECORD_OVERHEAD_BYTES`]).
    /// Kafka's default is 16 KiB per batch with many batches per request; here one request is
    /// one batch, so the default, 512 KiB, is larger, and well under the broker's
    /// `max.message.bytes` (1 MiB). A request still takes at least one `send` (or one whole
    /// `send_batch`, which is never split), whatever its size.
    pub batch_size: usize,
    /// `compression.type`: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (the broker compresses).
    pub compression: i32,
}

impl ProducerConfig {
    /// Kafka's defaults: acks=all, idempotence on, 120 s delivery and 30 s request timeouts;
    /// requests of at most 5000 records and 512 KiB.
    pub fn new(bootstrap: &[String]) -> Self {
        ProducerConfig {
            bootstrap: bootstrap.to_vec(),
            acks: -1,
            enable_idempotence: true,
            delivery_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(30),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            max_batch_records: 5000,
            batch_size: 512 * 1024,
            compression: 0,
        }
    }
}

struct Pending {
    records: Vec<pb::ProducedRecord>,
    /// The records' [`Record::estimated_size`], summed.
    bytes: usize,
    deadline: Instant,
    reply: oneshot::Sender<Result<i64>>,
}

struct Inner {
    cluster: Arc<Cluster>,
    config: ProducerConfig,
    queues: Mutex<HashMap<(String, i32), mpsc::UnboundedSender<Pending>>>,
    round_robin: Mutex<HashMap<String, u32>>,
    /// The producer id and epoch every partition starts with (idempotence only).
    producer_id: Option<(i64, i32)>,
}

/// A producer; cheap to clone (clones share connections, metadata and sequences).
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

impl Producer {
    /// Connect (lazily) to the cluster; with idempotence, get a producer id now.
    pub async fn new(config: ProducerConfig) -> Result<Self> {
        if config.enable_idempotence && config.acks != -1 {
            return Err(Error::Invalid(
                "enable_idempotence requires acks=-1 (all)".into(),
            ));
        }
        let cluster = Arc::new(Cluster::new(&config.bootstrap, config.request_timeout)?);
        let producer_id = if config.enable_idempotence {
            let deadline = Instant::now() + config.delivery_timeout;
            Some(init_producer_id(&cluster, &config, deadline).await?)
        } else {
            None
        };
        Ok(Producer {
            inner: Arc::new(Inner {
                cluster,
                config,
                queues: Mutex::new(HashMap::new()),
                round_robin: Mutex::new(HashMap::new()),
                producer_id,
            }),
        })
    }

    /// The producer id and epoch this producer started with (`None` unless idempotent).
    pub fn producer_id(&self) -> Option<(i64, i32)> {
        self.inner.producer_id
    }

    /// The cluster connections and metadata this producer uses.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.inner.cluster
    }

    /// The partition a record with `key` goes to: murmur2 of the key (Kafka's default
    /// partitioner); round-robin for a null key.
    pub async fn partition_for(&self, topic: &str, key: Option<&[u8]>) -> Result<i32> {
        let deadline = Instant::now() + self.inner.config.delivery_timeout;
        let count = self.partition_count(topic, deadline).await?;
        Ok(match key {
            Some(key) => partition_for_key(key, count),
            None => {
                let mut counters = self.inner.round_robin.lock().unwrap();
                let counter = counters.entry(topic.to_string()).or_insert(0);
                let partition = (*counter % count as u32) as i32;
                *counter = counter.wrapping_add(1);
                partition
            }
        })
    }

    async fn partition_count(&self, topic: &str, deadline: Instant) -> Result<i32> {
        let config = &self.inner.config;
        let mut backoff = Backoff::new(config.retry_backoff, config.retry_backoff_max);
        let started = Instant::now();
        loop {
            match self.inner.cluster.topic(topic).await {
                Ok(info) => return Ok(info.partitions.len() as i32),
                Err(e) if e.is_retriable() => {
                    let delay = backoff.next_delay();
                    if Instant::now() + delay >= deadline {
                        return Err(Error::TimedOut {
                            what: format!("metadata of {topic}"),
                            after: started.elapsed(),
                            last: Box::new(e),
                        });
                    }
                    tokio::time::sleep(delay).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Send one record; returns its partition and offset once acknowledged (per `acks`).
    pub async fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: Vec<Header>,
    ) -> Result<RecordMetadata> {
        let mut record = Record::new(key, value);
        record.headers = headers;
        self.send_record(topic, record).await
    }

    /// Send one record, built by the caller.
    pub async fn send_record(&self, topic: &str, record: Record) -> Result<RecordMetadata> {
        let partition = self.partition_for(topic, record.key.as_deref()).await?;
        let offset = self.enqueue(topic, partition, vec![record]).await?;
        Ok(RecordMetadata { partition, offset })
    }

    /// Send `records` to one partition in one `ProduceRecords` call (appended as one batch,
    /// all or none); returns the offset of the first (the n-th has `base + n`).
    ///
    /// A partition the topic does not have (checked against metadata asked afresh) fails at
    /// once with [`Error::Invalid`], as in Kafka, rather than being retried until the
    /// delivery timeout. The records are never split: a `send_batch` larger than the broker's
    /// `max.message.bytes` fails (`MESSAGE_TOO_LARGE` or gRPC `RESOURCE_EXHAUSTED`), at once.
    pub async fn send_batch(
        &self,
        topic: &str,
        partition: i32,
        records: Vec<Record>,
    ) -> Result<i64> {
        if records.is_empty() {
            return Err(Error::Invalid(
                "send_batch needs at least one record".into(),
            ));
        }
        let deadline = Instant::now() + self.inner.config.delivery_timeout;
        self.check_partition(topic, partition, deadline).await?;
        self.enqueue(topic, partition, records).await
    }

    /// `Ok` when `topic` has `partition`. The cached metadata is asked first; when it says
    /// no, the metadata is asked again from a broker (partitions may have been added since)
    /// before the answer is no: [`Error::Invalid`].
    async fn check_partition(&self, topic: &str, partition: i32, deadline: Instant) -> Result<()> {
        let mut count = self.partition_count(topic, deadline).await?;
        if partition >= count {
            self.inner.cluster.invalidate(topic);
            count = self.partition_count(topic, deadline).await?;
        }
        if (0..count).contains(&partition) {
            return Ok(());
        }
        Err(Error::Invalid(format!(
            "partition {partition} of {topic} does not exist: the topic has {count} \
             partitions, 0 to {}",
            count - 1
        )))
    }

    async fn enqueue(&self, topic: &str, partition: i32, records: Vec<Record>) -> Result<i64> {
        let (reply, answer) = oneshot::channel();
        let bytes = records.iter().map(Record::estimated_size).sum();
        let pending = Pending {
            records: records.into_iter().map(Record::into_pb).collect(),
            bytes,
            deadline: Instant::now() + self.inner.config.delivery_timeout,
            reply,
        };
        self.queue(topic, partition)
            .send(pending)
            .map_err(|_| Error::Invalid("the producer's partition task ended".into()))?;
        answer
            .await
            .map_err(|_| Error::Invalid("the producer's partition task ended".into()))?
    }

    fn queue(&self, topic: &str, partition: i32) -> mpsc::UnboundedSender<Pending> {
        let mut queues = self.inner.queues.lock().unwrap();
        let key = (topic.to_string(), partition);
        if let Some(queue) = queues.get(&key) {
            return queue.clone();
        }
        let (sender, receiver) = mpsc::unbounded_channel();
        let inner = Arc::clone(&self.inner);
        tokio::spawn(partition_task(
            inner,
            topic.to_string(),
            partition,
            receiver,
        ));
        queues.insert(key, sender.clone());
        sender
    }
}

/// One request's worth of pending sends: `first`, then whatever waits in `queue` while the
/// request stays within `max_records` records and `max_bytes` bytes (`first` alone may be
/// over either). Returns the sends, their record count, and the send taken from the queue
/// that did not fit (it starts the next request).
fn take_batch(
    first: Pending,
    queue: &mut mpsc::UnboundedReceiver<Pending>,
    max_records: usize,
    max_bytes: usize,
) -> (Vec<Pending>, usize, Option<Pending>) {
    let mut count = first.records.len();
    let mut bytes = first.bytes;
    let mut items = vec![first];
    while count < max_records && bytes < max_bytes {
        let Ok(more) = queue.try_recv() else {
            break;
        };
        if count + more.records.len() > max_records || bytes + more.bytes > max_bytes {
            return (items, count, Some(more));
        }
        count += more.records.len();
        bytes += more.bytes;
        items.push(more);
    }
    (items, count, None)
}

/// `InitProducerId` without a transactional id (any broker answers), retried until `deadline`.
async fn init_producer_id(
    cluster: &Cluster,
    config: &ProducerConfig,
    deadline: Instant,
) -> Result<(i64, i32)> {
    let mut retry = Retry::until(deadline, config.retry_backoff, config.retry_backoff_max);
    loop {
        let address = cluster.any_address();
        let error = match cluster.client(&address) {
            Err(e) => e,
            Ok(mut client) => {
                let request = cluster.request(pb::InitProducerIdRequest::default());
                match client.init_producer_id(request).await {
                    Ok(answer) => {
                        let answer = answer.into_inner();
                        if answer.error_code == 0 {
                            debug!(
                                "producer id {} epoch {}",
                                answer.producer_id, answer.producer_epoch
                            );
                            return Ok((answer.producer_id, answer.producer_epoch));
                        }
                        Error::from_code(answer.error_code, answer.error_message)
                    }
                    Err(status) => {
                        cluster.forget_channel(&address);
                        Error::from_status(&address, &status)
                    }
                }
            }
        };
        retry.wait_after(error, || "InitProducerId".into()).await?;
    }
}

/// Sends one partition's requests, one at a time, in the order `send` was called.
async fn partition_task(
    inner: Arc<Inner>,
    topic: String,
    partition: i32,
    mut queue: mpsc::UnboundedReceiver<Pending>,
) {
    let mut sequence = inner
        .producer_id
        .map(|(id, epoch)| PartitionSequence::new(id, epoch));
    // A request failed for good: this partition starts over under a new producer id.
    let mut restart = false;
    // Taken from the queue but over the last request's caps: the next request starts with it.
    let mut held: Option<Pending> = None;
    loop {
        let first = match held.take() {
            Some(first) => first,
            None => match queue.recv().await {
                Some(first) => first,
                None => break,
            },
        };
        let (items, count, next) = take_batch(
            first,
            &mut queue,
            inner.config.max_batch_records,
            inner.config.batch_size,
        );
        held = next;
        let deadline = items.iter().map(|p| p.deadline).min().expect("one item");
        let mut records = Vec::with_capacity(count);
        let mut replies = Vec::with_capacity(items.len());
        for item in items {
            replies.push((records.len() as i64, item.reply));
            records.extend(item.records);
        }
        if restart {
            if let Some(seq) = sequence.as_mut() {
                match init_producer_id(&inner.cluster, &inner.config, deadline).await {
                    Ok((id, epoch)) => {
                        seq.restart(id, epoch);
                        restart = false;
                    }
                    Err(e) => {
                        for (_, reply) in replies {
                            let _ = reply.send(Err(e.clone()));
                        }
                        continue;
                    }
                }
            }
        }
        let request = pb::ProduceRecordsRequest {
            topic: topic.clone(),
            partition,
            acks: inner.config.acks,
            timeout_ms: inner.config.request_timeout.as_millis() as i32,
            producer: sequence.as_mut().map(|s| s.reserve(count)),
            records,
            compression: inner.config.compression,
        };
        let result = produce_with_retries(&inner, &request, deadline).await;
        if result.is_err() && sequence.is_some() {
            restart = true;
        }
        for (index, reply) in replies {
            let _ = reply.send(
                result
                    .as_ref()
                    .map(|base| base + index)
                    .map_err(Clone::clone),
            );
        }
    }
}

/// Send `request` to the partition's leader until it is acknowledged, a non-retriable error
/// comes back, or `deadline` passes. Retries send the very same request.
async fn produce_with_retries(
    inner: &Inner,
    request: &pb::ProduceRecordsRequest,
    deadline: Instant,
) -> Result<i64> {
    let cluster = &inner.cluster;
    let config = &inner.config;
    let mut retry = Retry::until(deadline, config.retry_backoff, config.retry_backoff_max);
    let topic = &request.topic;
    loop {
        let error = match cluster.leader(topic, request.partition).await {
            Err(e) => e,
            Ok((leader, _)) => match cluster.client(&leader.address) {
                Err(e) => e,
                Ok(mut client) => {
                    // The broker's own timeout (timeout_ms) ends first, so its answer
                    // (REQUEST_TIMED_OUT) comes back rather than DEADLINE_EXCEEDED.
                    let mut call = tonic::Request::new(request.clone());
                    call.set_timeout(config.request_timeout + PRODUCE_DEADLINE_SLACK);
                    match client.produce_records(call).await {
                        Ok(answer) => {
                            let answer = answer.into_inner();
                            if answer.error_code == 0 {
                                return Ok(answer.base_offset);
                            }
                            if answer.retriable {
                                cluster.invalidate(topic);
                            }
                            Error::Broker {
                                code: answer.error_code,
                                name: answer.error_name,
                                retriable: answer.retriable,
                                message: answer.error_message,
                            }
                        }
                        Err(status) => {
                            cluster.forget_channel(&leader.address);
                            cluster.invalidate(topic);
                            Error::from_status(&leader.address, &status)
                        }
                    }
                }
            },
        };
        debug!("produce retry {topic}-{}: {error}", request.partition);
        retry
            .wait_after(error, || {
                format!("produce to {topic}-{}", request.partition)
            })
            .await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(records: usize, bytes_each: usize) -> Pending {
        let record = Record::new(None, Some(&vec![b'x'; bytes_each - RECORD_OVERHEAD_BYTES]));
        assert_eq!(record.estimated_size(), bytes_each);
        let (reply, _answer) = oneshot::channel();
        Pending {
            records: vec![record.into_pb(); records],
            bytes: records * bytes_each,
            deadline: Instant::now(),
            reply,
        }
    }

    fn sizes(items: &[Pending]) -> Vec<usize> {
        items.iter().map(|p| p.records.len()).collect()
    }

    #[test]
    fn estimated_size_counts_key_value_headers_and_overhead() {
        let mut record = Record::new(Some(b"key"), Some(b"value"));
        record.headers = vec![("h".into(), Some(b"12".to_vec())), ("n".into(), None)];
        assert_eq!(
            record.estimated_size(),
            3 + 5 + 3 + 1 + RECORD_OVERHEAD_BYTES
        );
        assert_eq!(
            Record::new(None, None).estimated_size(),
            RECORD_OVERHEAD_BYTES
        );
    }

    #[test]
    fn a_request_stops_at_the_byte_cap_and_keeps_the_rest_for_the_next() {
        let (sender, mut queue) = mpsc::unbounded_channel();
        for _ in 0..10 {
            sender.send(pending(1, 100)).unwrap();
        }
        let first = queue.try_recv().unwrap();
        let (items, count, held) = take_batch(first, &mut queue, 5000, 450);
        assert_eq!((sizes(&items), count), (vec![1, 1, 1, 1], 4));
        // The fifth was taken but did not fit: it starts the next request.
        let (items, count, held) = take_batch(held.unwrap(), &mut queue, 5000, 450);
        assert_eq!((items.len(), count), (4, 4));
        let (items, count, held) = take_batch(held.unwrap(), &mut queue, 5000, 450);
        assert_eq!((items.len(), count, held.is_none()), (2, 2, true));
    }

    #[test]
    fn a_request_stops_at_the_record_cap() {
        let (sender, mut queue) = mpsc::unbounded_channel();
        for _ in 0..4 {
            sender.send(pending(2, 30)).unwrap();
        }
        let first = queue.try_recv().unwrap();
        let (items, count, held) = take_batch(first, &mut queue, 5, 1 << 20);
        assert_eq!((sizes(&items), count), (vec![2, 2], 4));
        assert_eq!(held.map(|p| p.records.len()), Some(2));
    }

    #[test]
    fn a_send_over_the_caps_still_goes_alone() {
        let (sender, mut queue) = mpsc::unbounded_channel();
        sender.send(pending(1, 100)).unwrap();
        let (items, count, held) = take_batch(pending(3, 1000), &mut queue, 2, 500);
        assert_eq!((sizes(&items), count), (vec![3], 3));
        assert!(held.is_none());
        assert_eq!(queue.try_recv().unwrap().records.len(), 1);
    }
}
