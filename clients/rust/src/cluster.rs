//! Connections to brokers and the metadata cache: which broker leads which partition.
//!
//! Leader discovery is Kafka's: ask any broker for `Metadata` (the bootstrap servers first,
//! then any broker learned from an answer, in turn, so one dead node does not stop it), keep
//! the answer, and send each partition's requests to its `leader_id`. A leadership error in
//! an answer or a failed connection marks the cache stale: the next lookup asks again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tonic::transport::{Channel, Endpoint};

use crate::error::{codes, Error, Result};
use crate::pb;
use crate::pb::broker_client::BrokerClient;

/// Largest gRPC message sent or received (a big FetchRecords answer or send_batch).
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// One partition as the metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition number.
    pub partition: i32,
    /// The leader's node id, -1 while there is none.
    pub leader_id: i32,
    /// The leader's epoch.
    pub leader_epoch: i32,
    /// Replicas.
    pub replicas: Vec<i32>,
    /// In-sync replicas.
    pub isr: Vec<i32>,
    /// Kafka's error code for this partition (0: none).
    pub error_code: i32,
}

/// One topic as the metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Topic name.
    pub name: String,
    /// Kafka's error code for the topic (0: none; 3: no such topic).
    pub error_code: i32,
    /// Partitions, ordered by number.
    pub partitions: Vec<PartitionInfo>,
}

/// A broker's node id and address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Node id.
    pub node_id: i32,
    /// `host:port`.
    pub address: String,
}

#[derive(Default)]
struct Cache {
    brokers: HashMap<i32, String>,
    topics: HashMap<String, TopicInfo>,
}

/// Channels to brokers and the metadata cache, shared by a client's tasks.
pub struct Cluster {
    bootstrap: Vec<String>,
    request_timeout: Duration,
    channels: Mutex<HashMap<String, Channel>>,
    cache: Mutex<Cache>,
    rotation: AtomicUsize,
}

impl Cluster {
    /// A cluster reached through `bootstrap` (`host:port` entries).
    pub fn new(bootstrap: &[String], request_timeout: Duration) -> Result<Self> {
        let bootstrap: Vec<String> = bootstrap
            .iter()
            .flat_map(|b| b.split(','))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if bootstrap.is_empty() {
            return Err(Error::Invalid("no bootstrap servers given".into()));
        }
        Ok(Cluster {
            bootstrap,
            request_timeout,
            channels: Mutex::new(HashMap::new()),
            cache: Mutex::new(Cache::default()),
            rotation: AtomicUsize::new(0),
        })
    }

    /// The timeout of one request.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// A client for the broker at `address` (`host:port`); the channel is made once, lazily,
    /// and reconnects on its own.
    pub fn client(&self, address: &str) -> Result<BrokerClient<Channel>> {
        let mut channels = self.channels.lock().unwrap();
        let channel = match channels.get(address) {
            Some(channel) => channel.clone(),
            None => {
                let endpoint = Endpoint::from_shared(format!("http://{address}"))
                    .map_err(|e| Error::Invalid(format!("bad address {address}: {e}")))?
                    .connect_timeout(Duration::from_secs(5))
                    .tcp_nodelay(true)
                    .http2_keep_alive_interval(Duration::from_secs(10))
                    .keep_alive_timeout(Duration::from_secs(10));
                let channel = endpoint.connect_lazy();
                channels.insert(address.to_string(), channel.clone());
                channel
            }
        };
        Ok(BrokerClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Drop the channel to `address` (after a transport failure): the next call makes a new one.
    pub fn forget_channel(&self, address: &str) {
        self.channels.lock().unwrap().remove(address);
    }

    /// A gRPC request carrying this client's timeout.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.request_timeout);
        request
    }

    /// The addresses to ask for metadata: bootstrap servers, then every broker known, each
    /// once, starting one further along at each call.
    fn metadata_addresses(&self) -> Vec<String> {
        let mut addresses = self.bootstrap.clone();
        {
            let cache = self.cache.lock().unwrap();
            let mut known: Vec<_> = cache.brokers.iter().collect();
            known.sort();
            for (_, address) in known {
                if !addresses.contains(address) {
                    addresses.push(address.clone());
                }
            }
        }
        let start = self.rotation.fetch_add(1, Ordering::Relaxed) % addresses.len();
        addresses.rotate_left(start);
        addresses
    }

    /// Ask the brokers in turn for `Metadata` of `topics` (empty: every topic) until one
    /// answers; the cache takes the answer.
    pub async fn refresh(&self, topics: &[String]) -> Result<pb::MetadataResponse> {
        let mut last = Error::Invalid("no broker to ask".into());
        for address in self.metadata_addresses() {
            let mut client = match self.client(&address) {
                Ok(client) => client,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let request = self.request(pb::MetadataRequest {
                topics: topics.to_vec(),
            });
            match client.metadata(request).await {
                Ok(answer) => {
                    let answer = answer.into_inner();
                    self.absorb(&answer, topics.is_empty());
                    return Ok(answer);
                }
                Err(status) => {
                    self.forget_channel(&address);
                    last = Error::from_status(&address, &status);
                }
            }
        }
        Err(last)
    }

    fn absorb(&self, answer: &pb::MetadataResponse, every_topic: bool) {
        let mut cache = self.cache.lock().unwrap();
        cache.brokers = answer
            .brokers
            .iter()
            .map(|b| (b.node_id, format!("{}:{}", b.host, b.port)))
            .collect();
        if every_topic {
            cache.topics.clear();
        }
        for topic in &answer.topics {
            let mut partitions: Vec<PartitionInfo> = topic
                .partitions
                .iter()
                .map(|p| PartitionInfo {
                    partition: p.partition,
                    leader_id: p.leader_id,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.clone(),
                    isr: p.isr_nodes.clone(),
                    error_code: p.error_code,
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            cache.topics.insert(
                topic.name.clone(),
                TopicInfo {
                    name: topic.name.clone(),
                    error_code: topic.error_code,
                    partitions,
                },
            );
        }
    }

    /// Forget what the cache says of `topic`: its next lookup asks a broker.
    pub fn invalidate(&self, topic: &str) {
        self.cache.lock().unwrap().topics.remove(topic);
    }

    /// The topic from the cache, else from a refresh. A topic the cluster does not know is
    /// `UNKNOWN_TOPIC_OR_PARTITION` (retriable: it may be being created).
    pub async fn topic(&self, topic: &str) -> Result<TopicInfo> {
        let cached = self.cache.lock().unwrap().topics.get(topic).cloned();
        let info = match cached {
            Some(info) if info.error_code == 0 && !info.partitions.is_empty() => info,
            _ => {
                self.refresh(&[topic.to_string()]).await?;
                self.cache
                    .lock()
                    .unwrap()
                    .topics
                    .get(topic)
                    .cloned()
                    .ok_or_else(|| {
                        Error::from_code(codes::UNKNOWN_TOPIC_OR_PARTITION, topic.to_string())
                    })?
            }
        };
        if info.error_code != 0 {
            self.invalidate(topic);
            return Err(Error::from_code(info.error_code, format!("topic {topic}")));
        }
        if info.partitions.is_empty() {
            self.invalidate(topic);
            return Err(Error::from_code(
                codes::LEADER_NOT_AVAILABLE,
                format!("topic {topic} has no partitions yet"),
            ));
        }
        Ok(info)
    }

    /// The leader of a partition: its node id, address and epoch (the node id and epoch from
    /// the same metadata answer). No leader, or a leader the metadata names no address for,
    /// is `LEADER_NOT_AVAILABLE` (retriable).
    pub async fn leader(&self, topic: &str, partition: i32) -> Result<(BrokerInfo, i32)> {
        let info = self.topic(topic).await?;
        let Some(p) = info.partitions.iter().find(|p| p.partition == partition) else {
            self.invalidate(topic);
            return Err(Error::from_code(
                codes::UNKNOWN_TOPIC_OR_PARTITION,
                format!("{topic}-{partition}"),
            ));
        };
        let address = self
            .cache
            .lock()
            .unwrap()
            .brokers
            .get(&p.leader_id)
            .cloned();
        match address {
            Some(address) if p.leader_id >= 0 => Ok((
                BrokerInfo {
                    node_id: p.leader_id,
                    address,
                },
                p.leader_epoch,
            )),
            _ => {
                self.invalidate(topic);
                Err(Error::from_code(
                    codes::LEADER_NOT_AVAILABLE,
                    format!("{topic}-{partition} has no leader"),
                ))
            }
        }
    }

    /// Any broker's address: a known one, else a bootstrap server (in turn).
    pub fn any_address(&self) -> String {
        self.metadata_addresses()
            .into_iter()
            .next()
            .unwrap_or_else(|| self.bootstrap[0].clone())
    }
}

/// Retry pacing: exponential backoff between `initial` and `max`, within a deadline.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    /// Starts at `initial`, doubles up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff { next: initial, max }
    }

    /// The next wait (and doubles the one after).
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        delay
    }
}

/// The retries of one call: a growing backoff, bounded by a deadline.
pub struct Retry {
    backoff: Backoff,
    started: Instant,
    deadline: Instant,
}

impl Retry {
    /// Retries until `deadline`, waiting `initial` first and doubling up to `max`.
    pub fn until(deadline: Instant, initial: Duration, max: Duration) -> Self {
        Retry {
            backoff: Backoff::new(initial, max),
            started: Instant::now(),
            deadline,
        }
    }

    /// After a failed attempt: `error` itself when it is not retriable, `TimedOut` (naming
    /// `what` and the last error) when one more wait would pass the deadline; otherwise
    /// waits the next backoff, and the caller tries again.
    pub async fn wait_after(&mut self, error: Error, what: impl FnOnce() -> String) -> Result<()> {
        if !error.is_retriable() {
            return Err(error);
        }
        let delay = self.backoff.next_delay();
        if Instant::now() + delay >= self.deadline {
            return Err(Error::TimedOut {
                what: what(),
                after: self.started.elapsed(),
                last: Box::new(error),
            });
        }
        tokio::time::sleep(delay).await;
        Ok(())
    }
}
