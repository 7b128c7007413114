//! The producer: `ProduceRecords` to each partition's leader, with retries and idempotence.
//!
//! Every partition has one task that sends its requests one at a time (Kafka's
//! `max.in.flight.requests.per.connection=1`): records handed to [`Producer::send`] while a
//! request is out are sent together in the next one, so many concurrent `send`s make large
//! requests. A request is retried, unchanged, after a retriable error (a leadership error
//! refreshes the metadata first; a connection failure asks another broker) until
//! `delivery_timeout` has passed. With idempotence every request carries the producer id and
//! the sequence of its first record (see [`crate::sequence`]), so a retry of a request whose
//! answer was lost is recognised by the leader (old or new) and written once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::cluster::{Backoff, Cluster};
use crate::error::{Error, Result};
use crate::partitioner::partition_for_key;
use crate::pb;
use crate::sequence::PartitionSequence;
use crate::{debug, Header};

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
    /// `compression.type`: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (the broker compresses).
    pub compression: i32,
}

impl ProducerConfig {
    /// Kafka's defaults: acks=all, idempotence on, 120 s delivery and 30 s request timeouts.
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
            compression: 0,
        }
    }
}

struct Pending {
    records: Vec<pb::ProducedRecord>,
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
        self.enqueue(topic, partition, records).await
    }

    async fn enqueue(&self, topic: &str, partition: i32, records: Vec<Record>) -> Result<i64> {
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            records: records.into_iter().map(Record::into_pb).collect(),
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

/// `InitProducerId` without a transactional id (any broker answers), retried until `deadline`.
async fn init_producer_id(
    cluster: &Cluster,
    config: &ProducerConfig,
    deadline: Instant,
) -> Result<(i64, i32)> {
    let mut backoff = Backoff::new(config.retry_backoff, config.retry_backoff_max);
    let started = Instant::now();
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
        if !error.is_retriable() {
            return Err(error);
        }
        let delay = backoff.next_delay();
        if Instant::now() + delay >= deadline {
            return Err(Error::TimedOut {
                what: "InitProducerId".into(),
                after: started.elapsed(),
                last: Box::new(error),
            });
        }
        tokio::time::sleep(delay).await;
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
    while let Some(first) = queue.recv().await {
        let mut items = vec![first];
        let mut count = items[0].records.len();
        while count < inner.config.max_batch_records {
            match queue.try_recv() {
                Ok(more) => {
                    count += more.records.len();
                    items.push(more);
                }
                Err(_) => break,
            }
        }
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
    let mut backoff = Backoff::new(config.retry_backoff, config.retry_backoff_max);
    let started = Instant::now();
    let topic = &request.topic;
    loop {
        let error = match cluster.leader(topic, request.partition).await {
            Err(e) => e,
            Ok((leader, _)) => match cluster.client(&leader.address) {
                Err(e) => e,
                Ok(mut client) => {
                    match client
                        .produce_records(cluster.request(request.clone()))
                        .await
                    {
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
        if !error.is_retriable() {
            return Err(error);
        }
        let delay = backoff.next_delay();
        if Instant::now() + delay >= deadline {
            return Err(Error::TimedOut {
                what: format!("produce to {topic}-{}", request.partition),
                after: started.elapsed(),
                last: Box::new(error),
            });
        }
        debug!(
            "produce retry {topic}-{} in {delay:?}: {error}",
            request.partition
        );
        tokio::time::sleep(delay).await;
    }
}
