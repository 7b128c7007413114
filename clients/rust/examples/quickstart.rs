//! The README's walk-through as one program: create a topic, produce idempotently, read by
//! partition and in a group. `cargo run --example quickstart -- 127.0.0.1:9092`.

use std::time::Duration;

use lograft::{Admin, Consumer, ConsumerConfig, Offset, Producer, ProducerConfig, Record};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bootstrap: Vec<String> = vec![std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094".into())];

    let admin = Admin::new(&bootstrap, Duration::from_secs(60))?;
    match admin.create_topic("quickstart", 3, 3).await {
        Ok(()) => {}
        Err(e) if e.code() == Some(lograft::error::codes::TOPIC_ALREADY_EXISTS) => {}
        Err(e) => return Err(e.into()),
    }
    let topic = admin.wait_for_leaders("quickstart").await?;
    println!("{} partitions", topic.partitions.len());

    let mut config = ProducerConfig::new(&bootstrap);
    config.acks = -1;
    config.enable_idempotence = true;
    let producer = Producer::new(config).await?;
    let written = producer
        .send(
            "quickstart",
            Some("user-42".as_bytes()),
            Some("clicked".as_bytes()),
            vec![("source".into(), Some(b"web".to_vec()))],
        )
        .await?;
    println!("partition {} offset {}", written.partition, written.offset);
    let records = (0..1000)
        .map(|i| Record::new(None, Some(format!("v{i}").as_bytes())))
        .collect();
    let base = producer.send_batch("quickstart", 0, records).await?;
    println!("batch at {base}");

    let mut consumer = Consumer::new(ConsumerConfig::new(&bootstrap))?;
    consumer.assign("quickstart", written.partition, Offset::At(written.offset))?;
    let first = consumer.poll().await?;
    println!(
        "read {} records from offset {}",
        first.len(),
        written.offset
    );

    let mut config = ConsumerConfig::new(&bootstrap);
    config.group_id = Some("quickstart-readers".into());
    config.auto_offset_reset = Offset::Earliest;
    let mut member = Consumer::new(config)?;
    member.subscribe(&["quickstart"])?;
    let mut read = 0;
    for _ in 0..50 {
        read += member.poll().await?.len();
        member.commit().await?;
        if read >= 1001 {
            break;
        }
    }
    println!(
        "the group member read {read} records; owns {:?}",
        member.assignment()
    );
    member.close().await?;
    Ok(())
}
