//! The consumer: `FetchRecords` from each partition's leader, by hand-picked partitions
//! ([`Consumer::assign`]) or as a member of a group ([`Consumer::subscribe`], Kafka's
//! KIP-848 protocol, where the coordinator computes the assignment).
//!
//! In a group, a background task sends `ConsumerGroupHeartbeat`: member epoch 0 joins, the
//! answers give the member id, its epoch, the heartbeat interval and, when it changed, the
//! partitions the member owns from now on. Partitions taken away are no longer fetched at
//! once (a fetch under way for one is dropped, so their positions stop moving); then, when
//! `commit_on_revoke`, their positions are committed (a failed commit is a warning on stderr
//! and the partitions are released all the same); then the next heartbeat reports what the
//! member owns, which lets the coordinator hand them to another member. A new partition
//! starts at the group's committed offset (`OffsetFetch`), else at the earliest or latest
//! offset (`auto_offset_reset`). `FENCED_MEMBER_EPOCH` or `UNKNOWN_MEMBER_ID` loses every
//! partition and joins again; [`Consumer::close`] leaves (epoch -1).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

use crate::cluster::{Backoff, Cluster, Retry};
use crate::error::{codes, Error, Result};
use crate::pb;
use crate::{debug, warning, Header};

/// A topic and partition.
pub type TopicPartition = (String, i32);

/// Where a partition's reading starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offset {
    /// This offset.
    At(i64),
    /// The log start (`ListOffsets` -2).
    Earliest,
    /// The log end: only records written from now on (`ListOffsets` -1).
    Latest,
}

/// A consumed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp (ms since the epoch).
    pub timestamp_ms: i64,
    /// Key (`None`: a null key).
    pub key: Option<Vec<u8>>,
    /// Value (`None`: a null value).
    pub value: Option<Vec<u8>>,
    /// Headers.
    pub headers: Vec<Header>,
}

/// Consumer settings.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// `bootstrap.servers`.
    pub bootstrap: Vec<String>,
    /// `group.id`: needed by `subscribe` and `commit`.
    pub group_id: Option<String>,
    /// `auto.offset.reset`: where a partition without a committed offset starts
    /// ([`Offset::Earliest`] or [`Offset::Latest`]), and where reading resumes after
    /// `OFFSET_OUT_OF_RANGE`.
    pub auto_offset_reset: Offset,
    /// `fetch.max.wait.ms`: how long a fetch waits at the broker for records.
    pub fetch_max_wait: Duration,
    /// At most this many records per partition and fetch (0: no limit).
    pub max_records_per_fetch: i32,
    /// `max.partition.fetch.bytes` (0: the broker's default).
    pub max_bytes_per_fetch: i32,
    /// `isolation.level`: 0 read_uncommitted, 1 read_committed.
    pub isolation_level: i32,
    /// `request.timeout.ms`.
    pub request_timeout: Duration,
    /// `retry.backoff.ms`.
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms`.
    pub retry_backoff_max: Duration,
    /// `session.timeout.ms` asked of the coordinator (0: the broker's default).
    pub session_timeout_ms: i32,
    /// `max.poll.interval.ms`, sent as the rebalance timeout.
    pub rebalance_timeout_ms: i32,
    /// `client.id`.
    pub client_id: String,
    /// Commit the positions of revoked partitions before giving them up.
    pub commit_on_revoke: bool,
}

impl ConsumerConfig {
    /// Defaults: earliest, 500 ms fetch wait, read_uncommitted.
    pub fn new(bootstrap: &[String]) -> Self {
        ConsumerConfig {
            bootstrap: bootstrap.to_vec(),
            group_id: None,
            auto_offset_reset: Offset::Earliest,
            fetch_max_wait: Duration::from_millis(500),
            max_records_per_fetch: 0,
            max_bytes_per_fetch: 0,
            isolation_level: 0,
            request_timeout: Duration::from_secs(30),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            session_timeout_ms: 0,
            rebalance_timeout_ms: 300_000,
            client_id: "lograft-rs".into(),
            commit_on_revoke: true,
        }
    }
}

/// A partition owned by the group member: its position once known, and a token that
/// changes each time it is (re)assigned, so a fetch started before a revocation is dropped.
#[derive(Debug, Clone, Copy)]
struct Owned {
    position: Option<i64>,
    token: u64,
}

#[derive(Default)]
struct GroupState {
    member_id: String,
    member_epoch: i32,
    subscription: Vec<String>,
    owned: BTreeMap<TopicPartition, Owned>,
    next_token: u64,
    send_subscription: bool,
    send_owned: bool,
    leaving: bool,
    left: bool,
    fatal: Option<Error>,
    coordinator: Option<String>,
    /// Bumped at each change of the owned set.
    generation: u64,
}

struct Group {
    group_id: String,
    cluster: Arc<Cluster>,
    config: ConsumerConfig,
    state: Mutex<GroupState>,
    /// Wakes the heartbeat task (leave, owned set changed).
    wake_heartbeat: Notify,
    /// Wakes a poll waiting for partitions.
    assigned: Notify,
}

/// A consumer. Not shared between tasks (`poll` takes `&mut self`).
pub struct Consumer {
    cluster: Arc<Cluster>,
    config: ConsumerConfig,
    manual: BTreeMap<TopicPartition, Offset>,
    group: Option<Arc<Group>>,
    heartbeat: Option<JoinHandle<()>>,
    /// Fetches under way (at most one per partition); they outlive a `poll`, so the next
    /// fetch of a partition is already on its way while the caller handles the records.
    fetches: JoinSet<(FetchTarget, Result<pb::FetchRecordsResponse>)>,
    in_flight: BTreeSet<TopicPartition>,
}

/// One fetch to run: the partition, the offset, and (in a group) its ownership token.
#[derive(Debug, Clone)]
struct FetchTarget {
    tp: TopicPartition,
    offset: i64,
    token: u64,
}

impl Consumer {
    /// A consumer for the cluster (connections are made lazily).
    pub fn new(config: ConsumerConfig) -> Result<Self> {
        let cluster = Arc::new(Cluster::new(&config.bootstrap, config.request_timeout)?);
        Ok(Consumer {
            cluster,
            config,
            manual: BTreeMap::new(),
            group: None,
            heartbeat: None,
            fetches: JoinSet::new(),
            in_flight: BTreeSet::new(),
        })
    }

    /// Read `topic`'s `partition` from `offset` (no group membership).
    pub fn assign(&mut self, topic: &str, partition: i32, offset: Offset) -> Result<()> {
        if self.group.is_some() {
            return Err(Error::Invalid("assign after subscribe".into()));
        }
        self.manual.insert((topic.to_string(), partition), offset);
        Ok(())
    }

    /// Every partition of `topic`, from `offset` (the metadata tells the partitions).
    pub async fn assign_topic(&mut self, topic: &str, offset: Offset) -> Result<Vec<i32>> {
        let deadline = Instant::now() + self.config.request_timeout;
        let mut backoff = Backoff::new(self.config.retry_backoff, self.config.retry_backoff_max);
        let info = loop {
            match self.cluster.topic(topic).await {
                Ok(info) => break info,
                Err(e) if e.is_retriable() && Instant::now() < deadline => {
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(e) => return Err(e),
            }
        };
        let partitions: Vec<i32> = info.partitions.iter().map(|p| p.partition).collect();
        for p in &partitions {
            self.assign(topic, *p, offset)?;
        }
        Ok(partitions)
    }

    /// The position (next offset to read) of a hand-assigned partition, once known.
    pub fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        let tp = (topic.to_string(), partition);
        if let Some(group) = &self.group {
            return group.state.lock().unwrap().owned.get(&tp)?.position;
        }
        match self.manual.get(&tp)? {
            Offset::At(offset) => Some(*offset),
            _ => None,
        }
    }

    /// Join the group `group_id` subscribed to `topics`; the heartbeat task starts now.
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        let group_id = self
            .config
            .group_id
            .clone()
            .ok_or_else(|| Error::Invalid("subscribe needs a group_id".into()))?;
        if !self.manual.is_empty() {
            return Err(Error::Invalid("subscribe after assign".into()));
        }
        if let Some(group) = &self.group {
            let mut state = group.state.lock().unwrap();
            state.subscription = topics.iter().map(|t| t.to_string()).collect();
            state.send_subscription = true;
            drop(state);
            group.wake_heartbeat.notify_one();
            return Ok(());
        }
        let group = Arc::new(Group {
            group_id,
            cluster: Arc::clone(&self.cluster),
            config: self.config.clone(),
            state: Mutex::new(GroupState {
                subscription: topics.iter().map(|t| t.to_string()).collect(),
                send_subscription: true,
                send_owned: true,
                ..GroupState::default()
            }),
            wake_heartbeat: Notify::new(),
            assigned: Notify::new(),
        });
        self.heartbeat = Some(tokio::spawn(heartbeat_task(Arc::clone(&group))));
        self.group = Some(group);
        Ok(())
    }

    /// The partitions this member owns now (empty outside a group).
    pub fn assignment(&self) -> BTreeSet<TopicPartition> {
        match &self.group {
            Some(group) => group.state.lock().unwrap().owned.keys().cloned().collect(),
            None => self.manual.keys().cloned().collect(),
        }
    }

    /// The member id and epoch the coordinator gave (`None` outside a group).
    pub fn member(&self) -> Option<(String, i32)> {
        let group = self.group.as_ref()?;
        let state = group.state.lock().unwrap();
        Some((state.member_id.clone(), state.member_epoch))
    }

    /// Records from the assigned partitions, waiting up to `fetch_max_wait` for some.
    ///
    /// Each partition without a fetch under way gets one (`FetchRecords` from its position);
    /// `poll` returns with the first fetch to complete and every other one complete by then.
    /// A fetch whose partition moved meanwhile (revoked, reset) is dropped.
    pub async fn poll(&mut self) -> Result<Vec<ConsumerRecord>> {
        let targets = match self.group.clone() {
            Some(group) => {
                if let Some(error) = group.state.lock().unwrap().fatal.clone() {
                    return Err(error);
                }
                self.initialise_group_positions(&group).await?;
                let targets: Vec<FetchTarget> = group
                    .state
                    .lock()
                    .unwrap()
                    .owned
                    .iter()
                    .filter_map(|(tp, owned)| {
                        owned.position.map(|offset| FetchTarget {
                            tp: tp.clone(),
                            offset,
                            token: owned.token,
                        })
                    })
                    .collect();
                if targets.is_empty() {
                    // Nothing owned yet: wait for the heartbeat task's assignment.
                    let _ =
                        tokio::time::timeout(self.config.fetch_max_wait, group.assigned.notified())
                            .await;
                    return Ok(Vec::new());
                }
                targets
            }
            None => {
                self.initialise_manual_positions().await?;
                self.manual
                    .iter()
                    .filter_map(|(tp, offset)| match offset {
                        Offset::At(at) => Some(FetchTarget {
                            tp: tp.clone(),
                            offset: *at,
                            token: 0,
                        }),
                        _ => None,
                    })
                    .collect()
            }
        };
        for target in targets {
            if self.in_flight.insert(target.tp.clone()) {
                let cluster = Arc::clone(&self.cluster);
                let config = self.config.clone();
                self.fetches.spawn(async move {
                    let result = fetch_one(&cluster, &config, &target).await;
                    (target, result)
                });
            }
        }
        let mut results = Vec::new();
        match self.fetches.join_next().await {
            Some(Ok(done)) => results.push(done),
            Some(Err(_)) => self.in_flight.clear(), // only aborts end a fetch task early
            None => return Ok(Vec::new()),
        }
        while let Some(joined) = self.fetches.try_join_next() {
            if let Ok(done) = joined {
                results.push(done);
            }
        }
        let mut records = Vec::new();
        let mut failures = 0;
        for (target, result) in results {
            self.in_flight.remove(&target.tp);
            if !self.is_current(&target) {
                continue; // the partition was revoked or moved meanwhile
            }
            let answer = match result {
                Ok(answer) => answer,
                Err(e) if e.is_retriable() => {
                    failures += 1;
                    continue;
                }
                Err(e) if e.code() == Some(codes::OFFSET_OUT_OF_RANGE) => {
                    let reset = self.config.auto_offset_reset;
                    debug!("offset out of range {:?}: reset to {reset:?}", target.tp);
                    let offset = self.list_offset(&target.tp, reset).await?;
                    self.set_position(&target, offset);
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !self.set_position(&target, answer.next_offset) {
                continue; // revoked meanwhile: the records are another member's now
            }
            let (topic, partition) = target.tp;
            records.extend(answer.records.into_iter().map(|r| ConsumerRecord {
                topic: topic.clone(),
                partition,
                offset: r.offset,
                timestamp_ms: r.timestamp_ms,
                key: r.key,
                value: r.value,
                headers: r.headers.into_iter().map(|h| (h.key, h.value)).collect(),
            }));
        }
        if records.is_empty() && failures > 0 {
            tokio::time::sleep(self.config.retry_backoff).await;
        }
        Ok(records)
    }

    /// Whether `target` still is the partition's position (owned, not moved meanwhile).
    fn is_current(&self, target: &FetchTarget) -> bool {
        match &self.group {
            Some(group) => {
                let state = group.state.lock().unwrap();
                matches!(state.owned.get(&target.tp),
                    Some(owned) if owned.token == target.token && owned.position == Some(target.offset))
            }
            None => self.manual.get(&target.tp) == Some(&Offset::At(target.offset)),
        }
    }

    /// Move a partition's position after a fetch; false when it is no longer owned.
    fn set_position(&mut self, target: &FetchTarget, offset: i64) -> bool {
        match &self.group {
            Some(group) => {
                let mut state = group.state.lock().unwrap();
                match state.owned.get_mut(&target.tp) {
                    Some(owned) if owned.token == target.token => {
                        owned.position = Some(offset);
                        true
                    }
                    _ => false,
                }
            }
            None => {
                self.manual.insert(target.tp.clone(), Offset::At(offset));
                true
            }
        }
    }

    async fn initialise_manual_positions(&mut self) -> Result<()> {
        let pending: Vec<(TopicPartition, Offset)> = self
            .manual
            .iter()
            .filter(|(_, o)| !matches!(o, Offset::At(_)))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        for (tp, spec) in pending {
            let offset = self.list_offset(&tp, spec).await?;
            self.manual.insert(tp, Offset::At(offset));
        }
        Ok(())
    }

    /// Owned partitions without a position start at the committed offset, else per
    /// `auto_offset_reset`.
    async fn initialise_group_positions(&self, group: &Arc<Group>) -> Result<()> {
        let missing: Vec<(TopicPartition, u64)> = {
            let state = group.state.lock().unwrap();
            state
                .owned
                .iter()
                .filter(|(_, o)| o.position.is_none())
                .map(|(tp, o)| (tp.clone(), o.token))
                .collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        let tps: Vec<TopicPartition> = missing.iter().map(|(tp, _)| tp.clone()).collect();
        let committed = group.offset_fetch(&tps).await?;
        for (tp, token) in missing {
            let offset = match committed.get(&tp) {
                Some(offset) if *offset >= 0 => *offset,
                _ => self.list_offset(&tp, self.config.auto_offset_reset).await?,
            };
            let mut state = group.state.lock().unwrap();
            if let Some(owned) = state.owned.get_mut(&tp) {
                if owned.token == token && owned.position.is_none() {
                    owned.position = Some(offset);
                }
            }
        }
        Ok(())
    }

    /// `ListOffsets` to the leader: the earliest or latest offset (or `At` as is).
    async fn list_offset(&self, tp: &TopicPartition, spec: Offset) -> Result<i64> {
        let timestamp = match spec {
            Offset::At(offset) => return Ok(offset),
            Offset::Earliest => -2,
            Offset::Latest => -1,
        };
        let (topic, partition) = tp;
        let deadline = Instant::now() + self.config.request_timeout;
        let mut retry = Retry::until(
            deadline,
            self.config.retry_backoff,
            self.config.retry_backoff_max,
        );
        loop {
            let error = match self.cluster.leader(topic, *partition).await {
                Err(e) => e,
                Ok((leader, _)) => {
                    let request = pb::ListOffsetsRequest {
                        topics: vec![pb::ListOffsetsTopic {
                            name: topic.clone(),
                            partitions: vec![pb::ListOffsetsPartition {
                                partition: *partition,
                                timestamp,
                            }],
                        }],
                        isolation_level: self.config.isolation_level,
                    };
                    let mut client = self.cluster.client(&leader.address)?;
                    match client.list_offsets(self.cluster.request(request)).await {
                        Ok(answer) => {
                            let answer = answer.into_inner();
                            let p = answer
                                .topics
                                .into_iter()
                                .flat_map(|t| t.partitions)
                                .next()
                                .ok_or_else(|| Error::Invalid("empty ListOffsets answer".into()))?;
                            if p.error_code == 0 {
                                return Ok(p.offset);
                            }
                            self.cluster.invalidate(topic);
                            Error::from_code(p.error_code, p.error_message)
                        }
                        Err(status) => {
                            self.cluster.forget_channel(&leader.address);
                            self.cluster.invalidate(topic);
                            Error::from_status(&leader.address, &status)
                        }
                    }
                }
            };
            retry
                .wait_after(error, || format!("ListOffsets {topic}-{partition}"))
                .await?;
        }
    }

    /// Commit the positions of the owned (or hand-assigned) partitions to the group.
    pub async fn commit(&self) -> Result<()> {
        let group_id = self
            .config
            .group_id
            .clone()
            .ok_or_else(|| Error::Invalid("commit needs a group_id".into()))?;
        let offsets: Vec<(TopicPartition, i64)> = match &self.group {
            Some(group) => {
                let state = group.state.lock().unwrap();
                state
                    .owned
                    .iter()
                    .filter_map(|(tp, o)| o.position.map(|p| (tp.clone(), p)))
                    .collect()
            }
            None => self
                .manual
                .iter()
                .filter_map(|(tp, o)| match o {
                    Offset::At(at) => Some((tp.clone(), *at)),
                    _ => None,
                })
                .collect(),
        };
        match &self.group {
            Some(group) => group.offset_commit(&offsets).await,
            None => {
                let group = Group {
                    group_id,
                    cluster: Arc::clone(&self.cluster),
                    config: self.config.clone(),
                    state: Mutex::new(GroupState {
                        member_epoch: -1,
                        ..GroupState::default()
                    }),
                    wake_heartbeat: Notify::new(),
                    assigned: Notify::new(),
                };
                group.offset_commit(&offsets).await
            }
        }
    }

    /// The group's committed offsets of `partitions` (-1: none).
    pub async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i64>> {
        match &self.group {
            Some(group) => group.offset_fetch(partitions).await,
            None => {
                let group_id = self
                    .config
                    .group_id
                    .clone()
                    .ok_or_else(|| Error::Invalid("committed needs a group_id".into()))?;
                let group = Group {
                    group_id,
                    cluster: Arc::clone(&self.cluster),
                    config: self.config.clone(),
                    state: Mutex::new(GroupState::default()),
                    wake_heartbeat: Notify::new(),
                    assigned: Notify::new(),
                };
                group.offset_fetch(partitions).await
            }
        }
    }

    /// Leave the group (epoch -1) and stop the heartbeat task; waits up to the request
    /// timeout for the coordinator's answer. When none came by then (the coordinator is
    /// unreachable), the heartbeat task is aborted: nothing of the consumer outlives `close`,
    /// and the coordinator drops the member when its session times out.
    pub async fn close(mut self) -> Result<()> {
        let (Some(group), Some(mut task)) = (self.group.take(), self.heartbeat.take()) else {
            return Ok(());
        };
        group.state.lock().unwrap().leaving = true;
        group.wake_heartbeat.notify_one();
        if tokio::time::timeout(self.config.request_timeout, &mut task)
            .await
            .is_err()
        {
            debug!(
                "leaving group {} got no answer in {:?}: heartbeat task aborted",
                group.group_id, self.config.request_timeout
            );
            task.abort();
        }
        Ok(())
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
    }
}

/// One `FetchRecords` to the partition's leader (no retry: `poll` is the loop). A failure
/// marks the metadata stale so the next poll asks for the leader again.
///
/// The request carries, as `current_leader_epoch`, the leader epoch of the metadata that
/// named the leader (unset when that metadata has none). A leader of another epoch answers
/// `FENCED_LEADER_EPOCH` (the metadata is older than the broker's) or `UNKNOWN_LEADER_EPOCH`
/// (newer: the broker has not caught up): both retriable, so the metadata is refreshed and
/// the next poll fetches again.
async fn fetch_one(
    cluster: &Cluster,
    config: &ConsumerConfig,
    target: &FetchTarget,
) -> Result<pb::FetchRecordsResponse> {
    let (topic, partition) = &target.tp;
    // The leader and its epoch come from one metadata entry (one cached answer).
    let (leader, epoch) = cluster.leader(topic, *partition).await?;
    let mut client = cluster.client(&leader.address)?;
    let request = pb::FetchRecordsRequest {
        topic: topic.clone(),
        partition: *partition,
        offset: target.offset,
        max_wait_ms: config.fetch_max_wait.as_millis() as i32,
        max_bytes: config.max_bytes_per_fetch,
        max_records: config.max_records_per_fetch,
        isolation_level: config.isolation_level,
        current_leader_epoch: (epoch >= 0).then_some(epoch),
    };
    match client.fetch_records(cluster.request(request)).await {
        Ok(answer) => {
            let answer = answer.into_inner();
            if answer.error_code == 0 {
                return Ok(answer);
            }
            if answer.retriable {
                cluster.invalidate(topic);
            }
            Err(Error::Broker {
                code: answer.error_code,
                name: answer.error_name,
                retriable: answer.retriable,
                message: answer.error_message,
            })
        }
        Err(status) => {
            cluster.forget_channel(&leader.address);
            cluster.invalidate(topic);
            Err(Error::from_status(&leader.address, &status))
        }
    }
}

fn topic_partitions(tps: impl IntoIterator<Item = TopicPartition>) -> Vec<pb::TopicPartitions> {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in tps {
        by_topic.entry(topic).or_default().push(partition);
    }
    by_topic
        .into_iter()
        .map(|(topic, partitions)| pb::TopicPartitions { topic, partitions })
        .collect()
}

/// Coordinator errors after which the coordinator is looked up again.
fn coordinator_moved(code: i32) -> bool {
    matches!(
        code,
        codes::NOT_COORDINATOR
            | codes::COORDINATOR_NOT_AVAILABLE
            | codes::COORDINATOR_LOAD_IN_PROGRESS
    )
}

impl Group {
    /// The coordinator's address (cached), from `FindCoordinator` to any broker.
    async fn coordinator(&self) -> Result<String> {
        if let Some(address) = self.state.lock().unwrap().coordinator.clone() {
            return Ok(address);
        }
        let address = self.cluster.any_address();
        let mut client = self.cluster.client(&address)?;
        let request = pb::FindCoordinatorRequest {
            group_id: self.group_id.clone(),
            key_type: 0,
        };
        let answer = match client.find_coordinator(self.cluster.request(request)).await {
            Ok(answer) => answer.into_inner(),
            Err(status) => {
                self.cluster.forget_channel(&address);
                return Err(Error::from_status(&address, &status));
            }
        };
        if answer.error_code != 0 {
            return Err(Error::from_code(answer.error_code, answer.error_message));
        }
        let found = format!("{}:{}", answer.host, answer.port);
        debug!(
            "coordinator of {} is node {} at {found}",
            self.group_id, answer.node_id
        );
        self.state.lock().unwrap().coordinator = Some(found.clone());
        Ok(found)
    }

    fn forget_coordinator(&self) {
        let address = self.state.lock().unwrap().coordinator.take();
        if let Some(address) = address {
            self.cluster.forget_channel(&address);
        }
    }

    /// Retry `attempt` (one call to the coordinator) while it fails retriably, until the
    /// request timeout has passed.
    async fn with_retries<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T>
    where
        F: FnMut(String) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + self.config.request_timeout;
        let mut backoff = Backoff::new(self.config.retry_backoff, self.config.retry_backoff_max);
        let started = Instant::now();
        loop {
            let error = match self.coordinator().await {
                Err(e) => e,
                Ok(address) => match attempt(address).await {
                    Ok(value) => return Ok(value),
                    Err(e) => e,
                },
            };
            let retriable = error.is_retriable() || error.code() == Some(codes::STALE_MEMBER_EPOCH);
            if error.code().is_none_or(coordinator_moved) {
                self.forget_coordinator();
            }
            if !retriable {
                return Err(error);
            }
            let delay = backoff.next_delay();
            if Instant::now() + delay >= deadline {
                return Err(Error::TimedOut {
                    what: what.to_string(),
                    after: started.elapsed(),
                    last: Box::new(error),
                });
            }
            tokio::time::sleep(delay).await;
        }
    }

    async fn offset_fetch(&self, tps: &[TopicPartition]) -> Result<HashMap<TopicPartition, i64>> {
        let request = pb::OffsetFetchRequest {
            group_id: self.group_id.clone(),
            topics: topic_partitions(tps.iter().cloned()),
            require_stable: true,
        };
        self.with_retries("OffsetFetch", |address| {
            let request = request.clone();
            async move {
                let mut client = self.cluster.client(&address)?;
                let answer = client
                    .offset_fetch(self.cluster.request(request))
                    .await
                    .map_err(|s| Error::from_status(&address, &s))?
                    .into_inner();
                if answer.error_code != 0 {
                    return Err(Error::from_code(answer.error_code, answer.error_message));
                }
                let mut offsets = HashMap::new();
                for topic in answer.topics {
                    for p in topic.partitions {
                        if p.error_code != 0 {
                            return Err(Error::from_code(
                                p.error_code,
                                format!("{}-{}", topic.name, p.partition),
                            ));
                        }
                        offsets.insert((topic.name.clone(), p.partition), p.committed_offset);
                    }
                }
                Ok(offsets)
            }
        })
        .await
    }

    async fn offset_commit(&self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let mut by_topic: BTreeMap<String, Vec<pb::OffsetCommitPartition>> = BTreeMap::new();
        for ((topic, partition), offset) in offsets {
            by_topic
                .entry(topic.clone())
                .or_default()
                .push(pb::OffsetCommitPartition {
                    partition: *partition,
                    committed_offset: *offset,
                    committed_leader_epoch: -1,
                    metadata: String::new(),
                });
        }
        let topics: Vec<pb::OffsetCommitTopic> = by_topic
            .into_iter()
            .map(|(name, partitions)| pb::OffsetCommitTopic { name, partitions })
            .collect();
        self.with_retries("OffsetCommit", |address| {
            let topics = topics.clone();
            async move {
                // The member's current epoch, read at each attempt (a heartbeat may move it).
                let (member_id, member_epoch) = {
                    let state = self.state.lock().unwrap();
                    (state.member_id.clone(), state.member_epoch)
                };
                let request = pb::OffsetCommitRequest {
                    group_id: self.group_id.clone(),
                    member_id,
                    member_epoch,
                    topics,
                };
                let mut client = self.cluster.client(&address)?;
                let answer = client
                    .offset_commit(self.cluster.request(request))
                    .await
                    .map_err(|s| Error::from_status(&address, &s))?
                    .into_inner();
                if answer.error_code != 0 {
                    return Err(Error::from_code(answer.error_code, answer.error_message));
                }
                for topic in answer.topics {
                    for p in topic.partitions {
                        if p.error_code != 0 {
                            return Err(Error::from_code(p.error_code, p.error_message));
                        }
                    }
                }
                Ok(())
            }
        })
        .await
    }

    /// Build the next heartbeat from the state (fields sent only when needed, as Kafka's
    /// consumer does: the subscription and owned partitions when joining or changed).
    fn next_heartbeat(&self) -> (pb::ConsumerGroupHeartbeatRequest, bool) {
        let mut state = self.state.lock().unwrap();
        let joining = state.member_epoch == 0;
        let leaving = state.leaving;
        let request = pb::ConsumerGroupHeartbeatRequest {
            group_id: self.group_id.clone(),
            member_id: state.member_id.clone(),
            member_epoch: if leaving { -1 } else { state.member_epoch },
            rebalance_timeout_ms: self.config.rebalance_timeout_ms,
            subscribed_topic_names: (joining || state.send_subscription).then(|| {
                pb::SubscribedTopics {
                    names: state.subscription.clone(),
                }
            }),
            server_assignor: String::new(),
            owned_partitions: (joining || state.send_owned).then(|| pb::OwnedPartitions {
                topics: topic_partitions(state.owned.keys().cloned()),
            }),
            session_timeout_ms: self.config.session_timeout_ms,
            client_id: self.config.client_id.clone(),
        };
        state.send_subscription = false;
        state.send_owned = false;
        (request, leaving)
    }

    /// Apply a heartbeat answer. Returns the positions of revoked partitions (to commit)
    /// and the wait before the next heartbeat (`None`: stop).
    fn on_answer(
        &self,
        answer: pb::ConsumerGroupHeartbeatResponse,
        leaving: bool,
    ) -> (Vec<(TopicPartition, i64)>, Option<Duration>) {
        let mut state = self.state.lock().unwrap();
        let backoff = self.config.retry_backoff;
        if leaving {
            if answer.error_code != 0 && Error::from_code(answer.error_code, "").is_retriable() {
                if coordinator_moved(answer.error_code) {
                    state.coordinator = None;
                }
                return (Vec::new(), Some(backoff));
            }
            state.left = true;
            state.owned.clear();
            return (Vec::new(), None);
        }
        match answer.error_code {
            codes::NONE => {}
            codes::FENCED_MEMBER_EPOCH | codes::UNKNOWN_MEMBER_ID => {
                debug!(
                    "member {} fenced ({}): every partition lost, joining again",
                    state.member_id, answer.error_code
                );
                state.owned.clear();
                state.generation += 1;
                if answer.error_code == codes::UNKNOWN_MEMBER_ID {
                    state.member_id.clear();
                }
                state.member_epoch = 0;
                state.send_subscription = true;
                state.send_owned = true;
                return (Vec::new(), Some(Duration::ZERO));
            }
            codes::STALE_MEMBER_EPOCH => {
                state.send_subscription = true;
                state.send_owned = true;
                return (Vec::new(), Some(backoff));
            }
            code => {
                let error = Error::from_code(code, answer.error_message);
                state.send_subscription = true;
                state.send_owned = true;
                if coordinator_moved(code) {
                    state.coordinator = None;
                }
                if error.is_retriable() {
                    return (Vec::new(), Some(backoff));
                }
                debug!("group membership failed for good: {error}");
                state.owned.clear();
                state.fatal = Some(error);
                return (Vec::new(), None);
            }
        }
        if !answer.member_id.is_empty() {
            state.member_id = answer.member_id;
        }
        state.member_epoch = answer.member_epoch;
        let interval = Duration::from_millis(answer.heartbeat_interval_ms.max(1) as u64);
        let Some(assignment) = answer.assignment else {
            return (Vec::new(), Some(interval));
        };
        let target: BTreeSet<TopicPartition> = assignment
            .topics
            .into_iter()
            .flat_map(|t| {
                let topic = t.topic;
                t.partitions.into_iter().map(move |p| (topic.clone(), p))
            })
            .collect();
        let revoked: Vec<TopicPartition> = state
            .owned
            .keys()
            .filter(|tp| !target.contains(*tp))
            .cloned()
            .collect();
        let mut to_commit = Vec::new();
        for tp in &revoked {
            if let Some(Owned {
                position: Some(position),
                ..
            }) = state.owned.remove(tp)
            {
                to_commit.push((tp.clone(), position));
            }
        }
        let mut changed = !revoked.is_empty();
        for tp in target {
            if !state.owned.contains_key(&tp) {
                state.next_token += 1;
                let token = state.next_token;
                state.owned.insert(
                    tp,
                    Owned {
                        position: None,
                        token,
                    },
                );
                changed = true;
            }
        }
        if changed {
            state.generation += 1;
            state.send_owned = true;
            debug!(
                "member {} epoch {} owns {:?}",
                state.member_id,
                state.member_epoch,
                state.owned.keys().collect::<Vec<_>>()
            );
            drop(state);
            self.assigned.notify_waiters();
            // Report the new owned set at once.
            return (to_commit, Some(Duration::ZERO));
        }
        (to_commit, Some(interval))
    }
}

/// The member's heartbeat loop (see the module docs).
async fn heartbeat_task(group: Arc<Group>) {
    loop {
        let (request, leaving) = group.next_heartbeat();
        let call = async {
            let address = group.coordinator().await?;
            let mut client = group.cluster.client(&address)?;
            client
                .consumer_group_heartbeat(group.cluster.request(request))
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| Error::from_status(&address, &s))
        };
        let wait = match call.await {
            Ok(answer) => {
                let (to_commit, wait) = group.on_answer(answer, leaving);
                if !to_commit.is_empty() && group.config.commit_on_revoke {
                    // The revoked partitions are no longer fetched and their positions no
                    // longer move (on_answer took them out of `owned`); their positions are
                    // committed now, before the next heartbeat reports them released, so
                    // their next owner starts where this member stopped. A commit that fails
                    // (after its retries, up to the request timeout) is a warning: the
                    // partitions are released all the same, and their next owner starts at
                    // the offset committed before, reading again what this member read since.
                    if let Err(e) = group.offset_commit(&to_commit).await {
                        warning!(
                            "group {}: commit of revoked partitions {:?} failed, released \
                             uncommitted: {e}",
                            group.group_id,
                            to_commit
                        );
                    }
                }
                wait
            }
            Err(e) => {
                debug!("heartbeat failed: {e}");
                if let Some(code) = e.code() {
                    if coordinator_moved(code) {
                        group.forget_coordinator();
                    }
                } else {
                    group.forget_coordinator();
                }
                let mut state = group.state.lock().unwrap();
                if !e.is_retriable() && !leaving {
                    state.fatal = Some(e);
                    state.owned.clear();
                    None
                } else {
                    state.send_subscription = true;
                    state.send_owned = true;
                    Some(group.config.retry_backoff)
                }
            }
        };
        let Some(wait) = wait else {
            group.assigned.notify_waiters();
            return;
        };
        if wait.is_zero() {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = group.wake_heartbeat.notified() => {}
        }
    }
}
