//! Topic administration: `CreateTopics`, and topics described from `Metadata`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::{Backoff, BrokerInfo, Cluster, Retry, TopicInfo};
use crate::error::{Error, Result};
use crate::pb;

/// Creates and describes topics.
pub struct Admin {
    cluster: Arc<Cluster>,
    timeout: Duration,
}

impl Admin {
    /// An admin client for the cluster at `bootstrap`; `timeout` bounds each operation,
    /// retries of retriable errors included.
    pub fn new(bootstrap: &[String], timeout: Duration) -> Result<Self> {
        Ok(Admin {
            cluster: Arc::new(Cluster::new(
                bootstrap,
                timeout.min(Duration::from_secs(30)),
            )?),
            timeout,
        })
    }

    /// Create a topic (the broker forwards it to the active controller).
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
    ) -> Result<()> {
        self.create_topic_with_configs(name, partitions, replication_factor, &[])
            .await
    }

    /// Create a topic with config overrides (`retention.ms`, `min.insync.replicas`, ...).
    pub async fn create_topic_with_configs(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        configs: &[(String, String)],
    ) -> Result<()> {
        let request = pb::CreateTopicsRequest {
            topics: vec![pb::CreatableTopic {
                name: name.to_string(),
                num_partitions: partitions,
                replication_factor,
                configs: configs.iter().cloned().collect(),
            }],
            timeout_ms: self.timeout.as_millis() as i32,
            validate_only: false,
        };
        let deadline = Instant::now() + self.timeout;
        let mut retry = Retry::until(deadline, Duration::from_millis(100), Duration::from_secs(1));
        loop {
            let address = self.cluster.any_address();
            let error = match self.cluster.client(&address) {
                Err(e) => e,
                Ok(mut client) => match client
                    .create_topics(self.cluster.request(request.clone()))
                    .await
                {
                    Ok(answer) => {
                        let answer = answer.into_inner();
                        let result =
                            answer.topics.into_iter().next().ok_or_else(|| {
                                Error::Invalid("empty CreateTopics answer".into())
                            })?;
                        if result.error_code == 0 {
                            return Ok(());
                        }
                        Error::from_code(result.error_code, result.error_message)
                    }
                    Err(status) => {
                        self.cluster.forget_channel(&address);
                        Error::from_status(&address, &status)
                    }
                },
            };
            retry
                .wait_after(error, || format!("create topic {name}"))
                .await?;
        }
    }

    /// Every topic's name, sorted.
    pub async fn list_topics(&self) -> Result<Vec<String>> {
        let answer = self.metadata(&[]).await?;
        let mut names: Vec<String> = answer.topics.into_iter().map(|t| t.name).collect();
        names.sort();
        Ok(names)
    }

    /// The brokers the metadata lists.
    pub async fn brokers(&self) -> Result<Vec<BrokerInfo>> {
        let answer = self.metadata(&[]).await?;
        let mut brokers: Vec<BrokerInfo> = answer
            .brokers
            .into_iter()
            .map(|b| BrokerInfo {
                node_id: b.node_id,
                address: format!("{}:{}", b.host, b.port),
            })
            .collect();
        brokers.sort_by_key(|b| b.node_id);
        Ok(brokers)
    }

    /// A topic's partitions, leaders, replicas and in-sync replicas. A topic the cluster
    /// does not know is `UNKNOWN_TOPIC_OR_PARTITION`.
    pub async fn describe_topic(&self, name: &str) -> Result<TopicInfo> {
        self.cluster.invalidate(name);
        self.cluster.topic(name).await
    }

    /// Wait until every partition of `name` has a leader (a topic just created may not).
    pub async fn wait_for_leaders(&self, name: &str) -> Result<TopicInfo> {
        let deadline = Instant::now() + self.timeout;
        let mut retry = Retry::until(
            deadline,
            Duration::from_millis(50),
            Duration::from_millis(500),
        );
        loop {
            let error = match self.describe_topic(name).await {
                Ok(info) if info.partitions.iter().all(|p| p.leader_id >= 0) => return Ok(info),
                Ok(_) => Error::from_code(crate::error::codes::LEADER_NOT_AVAILABLE, name),
                Err(e) if e.is_retriable() => e,
                Err(e) => return Err(e),
            };
            retry
                .wait_after(error, || format!("leaders of {name}"))
                .await?;
        }
    }

    async fn metadata(&self, topics: &[String]) -> Result<pb::MetadataResponse> {
        let deadline = Instant::now() + self.timeout;
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        loop {
            match self.cluster.refresh(topics).await {
                Ok(answer) => return Ok(answer),
                Err(e) if e.is_retriable() => {
                    let delay = backoff.next_delay();
                    if Instant::now() + delay >= deadline {
                        return Err(e);
                    }
                    tokio::time::sleep(delay).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}
