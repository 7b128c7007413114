//! `lograft-rs`: a small command line over the `lograft` crate, used by the project's tests
//! and benchmark (`tests/integration/test_rust_client.py`, `bench/rust_vs_python.py`).
//!
//! ```text
//! lograft-rs create-topic   --bootstrap B --topic T [--partitions 3] [--replication-factor 3]
//! lograft-rs describe       --bootstrap B --topic T
//! lograft-rs list-topics    --bootstrap B
//! lograft-rs produce        --bootstrap B --topic T --count N [--acks all|1|0] [--idempotent]
//!                           [--key-prefix k] [--start 0] [--value-size 0] [--concurrency 1]
//!                           [--partition P] [--delivery-timeout-s 120]
//!     prints "ACK <key> <partition> <offset>" per acknowledged record,
//!     "FAIL <key> <error>" per failed one (then exits 1)
//! lograft-rs consume        --bootstrap B --topic T [--partition P] [--offset earliest|latest|N]
//!                           --count N [--timeout-s 60]
//!     prints "REC <partition> <offset> <key> <value>"; exits 1 short of N records
//! lograft-rs group-consume  --bootstrap B --group G --topic T[,T2] [--count N] [--timeout-s S]
//!                           [--auto-offset-reset earliest|latest]
//!     prints "ASSIGNED <t>-<p>,...", "REC ..." lines, commits after each poll; stops at N
//!     records, at the timeout, or when its standard input closes; then commits, leaves the
//!     group and prints "LEFT"
//! lograft-rs perf-produce   --bootstrap B --topic T --count N [--size 100] [--batch B]
//!                           [--acks all] [--idempotent] [--concurrency 1000]
//!                           [--max-batch-records 5000] [--batch-size 524288]
//! lograft-rs perf-consume   --bootstrap B --topic T --count N [--timeout-s 120]
//!     print {"records": n, "seconds": s, "records_per_sec": r}
//! ```

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lograft::{Admin, Consumer, ConsumerConfig, Offset, Producer, ProducerConfig, Record};
use tokio::task::JoinSet;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    values: HashMap<String, String>,
    flags: BTreeSet<String>,
}

const FLAGS: &[&str] = &["idempotent", "no-idempotence"];

impl Args {
    fn parse(raw: &[String]) -> Result<Self, BoxError> {
        let mut values = HashMap::new();
        let mut flags = BTreeSet::new();
        let mut i = 0;
        while i < raw.len() {
            let Some(name) = raw[i].strip_prefix("--") else {
                return Err(format!("unexpected argument {}", raw[i]).into());
            };
            if let Some((name, value)) = name.split_once('=') {
                values.insert(name.to_string(), value.to_string());
            } else if FLAGS.contains(&name) {
                flags.insert(name.to_string());
            } else {
                let value = raw
                    .get(i + 1)
                    .ok_or_else(|| format!("--{name} needs a value"))?;
                values.insert(name.to_string(), value.clone());
                i += 1;
            }
            i += 1;
        }
        Ok(Args { values, flags })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    fn required(&self, name: &str) -> Result<&str, BoxError> {
        self.get(name)
            .ok_or_else(|| format!("--{name} is required").into())
    }

    fn number<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, BoxError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{name}: not a number: {v}").into()),
        }
    }

    fn flag(&self, name: &str) -> bool {
        self.flags.contains(name)
    }

    fn bootstrap(&self) -> Result<Vec<String>, BoxError> {
        Ok(vec![self.required("bootstrap")?.to_string()])
    }

    fn acks(&self) -> Result<i32, BoxError> {
        match self.get("acks").unwrap_or("all") {
            "all" | "-1" => Ok(-1),
            "1" => Ok(1),
            "0" => Ok(0),
            other => Err(format!("--acks: all, 1 or 0, not {other}").into()),
        }
    }
}

fn line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

fn text(bytes: &Option<Vec<u8>>) -> String {
    match bytes {
        Some(b) => String::from_utf8_lossy(b).into_owned(),
        None => "<null>".into(),
    }
}

fn value_of(index: u64, size: usize) -> Vec<u8> {
    let mut value = format!("v-{index}").into_bytes();
    if value.len() < size {
        value.resize(size, b'.');
    }
    value
}

async fn create_topic(args: &Args) -> Result<bool, BoxError> {
    let admin = Admin::new(&args.bootstrap()?, Duration::from_secs(60))?;
    let topic = args.required("topic")?;
    admin
        .create_topic(
            topic,
            args.number("partitions", 3)?,
            args.number("replication-factor", 3)?,
        )
        .await?;
    let info = admin.wait_for_leaders(topic).await?;
    line(&format!("CREATED {topic} {}", info.partitions.len()));
    Ok(true)
}

async fn describe(args: &Args) -> Result<bool, BoxError> {
    let admin = Admin::new(&args.bootstrap()?, Duration::from_secs(30))?;
    let topic = args.required("topic")?;
    let info = admin.describe_topic(topic).await?;
    line(&format!(
        "TOPIC {} PARTITIONS {}",
        info.name,
        info.partitions.len()
    ));
    let join = |ids: &[i32]| ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    for p in &info.partitions {
        line(&format!(
            "PARTITION {} LEADER {} EPOCH {} REPLICAS {} ISR {}",
            p.partition,
            p.leader_id,
            p.leader_epoch,
            join(&p.replicas),
            join(&p.isr)
        ));
    }
    Ok(true)
}

async fn list_topics(args: &Args) -> Result<bool, BoxError> {
    let admin = Admin::new(&args.bootstrap()?, Duration::from_secs(30))?;
    for name in admin.list_topics().await? {
        line(&name);
    }
    Ok(true)
}

fn producer_config(args: &Args) -> Result<ProducerConfig, BoxError> {
    let mut config = ProducerConfig::new(&args.bootstrap()?);
    config.acks = args.acks()?;
    config.enable_idempotence = args.flag("idempotent");
    config.delivery_timeout = Duration::from_secs(args.number("delivery-timeout-s", 120)?);
    config.max_batch_records = args.number("max-batch-records", config.max_batch_records)?;
    config.batch_size = args.number("batch-size", config.batch_size)?;
    Ok(config)
}

async fn produce(args: &Args) -> Result<bool, BoxError> {
    let producer = Producer::new(producer_config(args)?).await?;
    let topic: Arc<str> = args.required("topic")?.into();
    let count: u64 = args.number("count", 10)?;
    let start: u64 = args.number("start", 0)?;
    let size: usize = args.number("value-size", 0)?;
    let concurrency: usize = args.number("concurrency", 1)?;
    let prefix = args.get("key-prefix").unwrap_or("k").to_string();
    let partition: Option<i32> = args.get("partition").map(str::parse).transpose()?;
    let mut tasks = JoinSet::new();
    let mut ok = true;
    let mut handle = |done: (String, lograft::Result<(i32, i64)>)| match done.1 {
        Ok((partition, offset)) => line(&format!("ACK {} {partition} {offset}", done.0)),
        Err(e) => {
            ok = false;
            line(&format!("FAIL {} {e}", done.0));
        }
    };
    for i in start..start + count {
        while tasks.len() >= concurrency.max(1) {
            handle(tasks.join_next().await.expect("a task")?);
        }
        let producer = producer.clone();
        let topic = Arc::clone(&topic);
        let key = format!("{prefix}-{i}");
        tasks.spawn(async move {
            let record = Record::new(Some(key.as_bytes()), Some(&value_of(i, size)));
            let result = match partition {
                Some(p) => producer
                    .send_batch(&topic, p, vec![record])
                    .await
                    .map(|offset| (p, offset)),
                None => producer
                    .send_record(&topic, record)
                    .await
                    .map(|m| (m.partition, m.offset)),
            };
            (key, result)
        });
    }
    while let Some(done) = tasks.join_next().await {
        handle(done?);
    }
    Ok(ok)
}

fn parse_offset(value: &str) -> Result<Offset, BoxError> {
    Ok(match value {
        "earliest" => Offset::Earliest,
        "latest" => Offset::Latest,
        n => Offset::At(n.parse()?),
    })
}

async fn consume(args: &Args) -> Result<bool, BoxError> {
    let mut consumer = Consumer::new(ConsumerConfig::new(&args.bootstrap()?))?;
    let topic = args.required("topic")?;
    let offset = parse_offset(args.get("offset").unwrap_or("earliest"))?;
    match args.get("partition") {
        Some(p) => consumer.assign(topic, p.parse()?, offset)?,
        None => {
            consumer.assign_topic(topic, offset).await?;
        }
    }
    let count: u64 = args.number("count", u64::MAX)?;
    let deadline = Instant::now() + Duration::from_secs(args.number("timeout-s", 60)?);
    let mut got = 0u64;
    while got < count {
        if Instant::now() >= deadline {
            line(&format!("TIMEOUT {got}"));
            return Ok(false);
        }
        for r in consumer.poll().await? {
            line(&format!(
                "REC {} {} {} {}",
                r.partition,
                r.offset,
                text(&r.key),
                text(&r.value)
            ));
            got += 1;
        }
    }
    Ok(true)
}

async fn group_consume(args: &Args) -> Result<bool, BoxError> {
    let mut config = ConsumerConfig::new(&args.bootstrap()?);
    config.group_id = Some(args.required("group")?.to_string());
    config.auto_offset_reset = parse_offset(args.get("auto-offset-reset").unwrap_or("earliest"))?;
    config.fetch_max_wait = Duration::from_millis(args.number("max-wait-ms", 200)?);
    let mut consumer = Consumer::new(config)?;
    let topics: Vec<&str> = args.required("topic")?.split(',').collect();
    consumer.subscribe(&topics)?;
    let count: u64 = args.number("count", u64::MAX)?;
    let deadline = Instant::now() + Duration::from_secs(args.number("timeout-s", 600)?);
    // Standard input closing is the signal to stop (a reader thread: it never blocks exit).
    let (closed_tx, mut closed) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        let _ = closed_tx.send(());
    });
    let mut got = 0u64;
    let mut assignment = BTreeSet::new();
    let mut ok = true;
    while got < count {
        if Instant::now() >= deadline {
            line(&format!("TIMEOUT {got}"));
            ok = false;
            break;
        }
        if closed.try_recv().is_ok() {
            break;
        }
        let records = tokio::select! {
            polled = consumer.poll() => polled?,
            _ = &mut closed => break,
        };
        let now = consumer.assignment();
        if now != assignment {
            let names: Vec<String> = now.iter().map(|(t, p)| format!("{t}-{p}")).collect();
            line(&format!("ASSIGNED {}", names.join(",")));
            assignment = now;
        }
        if records.is_empty() {
            continue;
        }
        for r in &records {
            line(&format!(
                "REC {} {} {} {}",
                r.partition,
                r.offset,
                text(&r.key),
                text(&r.value)
            ));
        }
        got += records.len() as u64;
        consumer.commit().await?;
        line(&format!("COMMITTED {got}"));
    }
    consumer.commit().await?;
    consumer.close().await?;
    line("LEFT");
    Ok(ok)
}

fn json(records: u64, seconds: f64, extra: &str) {
    line(&format!(
        "{{\"records\": {records}, \"seconds\": {seconds:.4}, \"records_per_sec\": {:.1}{extra}}}",
        records as f64 / seconds
    ));
}

async fn perf_produce(args: &Args) -> Result<bool, BoxError> {
    let producer = Producer::new(producer_config(args)?).await?;
    let topic: Arc<str> = args.required("topic")?.into();
    let count: u64 = args.number("count", 100_000)?;
    let size: usize = args.number("size", 100)?;
    let value: Arc<[u8]> = vec![b'x'; size].into();
    let started = Instant::now();
    let mode;
    match args.get("batch") {
        Some(batch) => {
            // One task per partition, each sending its share in calls of `batch` records.
            mode = "batch";
            let batch: u64 = batch.parse()?;
            let partitions = producer.cluster().topic(&topic).await?.partitions.len() as u64;
            let mut tasks = JoinSet::new();
            for p in 0..partitions {
                let share = count / partitions + u64::from(p < count % partitions);
                let producer = producer.clone();
                let topic = Arc::clone(&topic);
                let value = Arc::clone(&value);
                tasks.spawn(async move {
                    let mut sent = 0;
                    while sent < share {
                        let n = batch.min(share - sent);
                        let records = (0..n).map(|_| Record::new(None, Some(&value))).collect();
                        producer.send_batch(&topic, p as i32, records).await?;
                        sent += n;
                    }
                    Ok::<(), lograft::Error>(())
                });
            }
            while let Some(done) = tasks.join_next().await {
                done??;
            }
        }
        None => {
            // One send per record, `concurrency` awaiting at once (the producer's partition
            // tasks put the records sent meanwhile into one request).
            mode = "per-record";
            let concurrency: usize = args.number("concurrency", 1000)?;
            let mut tasks = JoinSet::new();
            for _ in 0..count {
                while tasks.len() >= concurrency {
                    tasks.join_next().await.expect("a task")??;
                }
                let producer = producer.clone();
                let topic = Arc::clone(&topic);
                let value = Arc::clone(&value);
                tasks.spawn(async move {
                    producer
                        .send(&topic, None, Some(&value), Vec::new())
                        .await
                        .map(|_| ())
                });
            }
            while let Some(done) = tasks.join_next().await {
                done??;
            }
        }
    }
    json(
        count,
        started.elapsed().as_secs_f64(),
        &format!(", \"mode\": \"{mode}\""),
    );
    Ok(true)
}

async fn perf_consume(args: &Args) -> Result<bool, BoxError> {
    let mut config = ConsumerConfig::new(&args.bootstrap()?);
    config.fetch_max_wait = Duration::from_millis(100);
    let mut consumer = Consumer::new(config)?;
    let count: u64 = args.number("count", 100_000)?;
    let deadline = Instant::now() + Duration::from_secs(args.number("timeout-s", 120)?);
    let started = Instant::now();
    consumer
        .assign_topic(args.required("topic")?, Offset::Earliest)
        .await?;
    let mut got = 0u64;
    while got < count {
        if Instant::now() >= deadline {
            line(&format!("TIMEOUT {got}"));
            return Ok(false);
        }
        got += consumer.poll().await?.len() as u64;
    }
    json(got, started.elapsed().as_secs_f64(), "");
    Ok(true)
}

async fn run(command: &str, args: &Args) -> Result<bool, BoxError> {
    match command {
        "create-topic" => create_topic(args).await,
        "describe" => describe(args).await,
        "list-topics" => list_topics(args).await,
        "produce" => produce(args).await,
        "consume" => consume(args).await,
        "group-consume" => group_consume(args).await,
        "perf-produce" => perf_produce(args).await,
        "perf-consume" => perf_consume(args).await,
        other => Err(format!("unknown command {other}").into()),
    }
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let Some(command) = raw.first().cloned() else {
        eprintln!(
            "usage: lograft-rs COMMAND --bootstrap HOST:PORT[,...] ... (see the source's docs)"
        );
        return ExitCode::from(2);
    };
    let args = match Args::parse(&raw[1..]) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("lograft-rs: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = runtime.block_on(run(&command, &args));
    let code = match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("lograft-rs {command}: {e}");
            ExitCode::from(1)
        }
    };
    // Tasks still running (a dropped long-poll) must not hold the exit up.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}
