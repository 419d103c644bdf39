//! The in-memory cluster these tests run whole jobs on: every subtask of a job as a tokio task,
//! exchanges as bounded channels (one per consumer subtask, a channel index per producer).

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use floe_datastream::{BuiltJob, TaskContext, TaskMetrics};
use floe_scheduler::job_graph::VertexIndex;
use floe_shuffle::{GateItem, InputGate, PartitionStats, PartitionWriter};
use tokio::sync::mpsc;

/// Writer: one bounded channel per consumer subtask (backpressure), bytes counted per subpartition.
/// A buffer and the producer subtask that sent it.
type Sent = (usize, Bytes);

pub struct MemWriter {
    /// The producer subtask: the consumer's channel index.
    from: usize,
    to: Vec<mpsc::Sender<Sent>>,
    bytes: Vec<u64>,
}

#[async_trait]
impl PartitionWriter for MemWriter {
    fn num_subpartitions(&self) -> u32 {
        self.to.len() as u32
    }
    async fn emit(&mut self, subpartition: u32, buffer: Bytes) -> floe_shuffle::Result<()> {
        self.bytes[subpartition as usize] += buffer.len() as u64;
        self.to[subpartition as usize]
            .send((self.from, buffer))
            .await
            .map_err(|_| floe_shuffle::Error::Released("consumer gone".into()))
    }
    async fn finish(self: Box<Self>) -> floe_shuffle::Result<PartitionStats> {
        Ok(PartitionStats {
            bytes_per_subpartition: self.bytes,
        })
    }
}

/// Gate: ends when every producer's writer is gone; one channel per producer subtask.
pub struct MemGate(mpsc::Receiver<Sent>, usize);

#[async_trait]
impl InputGate for MemGate {
    async fn next(&mut self) -> floe_shuffle::Result<Option<GateItem>> {
        Ok(self
            .0
            .recv()
            .await
            .map(|(channel, data)| GateItem::Buffer { channel, data }))
    }
    fn num_channels(&self) -> usize {
        self.1
    }
}

/// Runs every subtask of the job concurrently; returns the stats of all tasks.
pub async fn run(job: &BuiltJob, buffer_size: usize, timeout: Option<Duration>) -> Vec<Vec<PartitionStats>> {
    run_tasks(job, buffer_size, timeout)
        .await
        .into_iter()
        .map(|t| t.result.expect("task succeeds"))
        .collect()
}

/// How one subtask ended, and its counters (with the metrics its functions registered).
pub struct TaskRun {
    pub vertex: u32,
    pub subtask: u32,
    pub result: Result<Vec<PartitionStats>, String>,
    pub metrics: Arc<TaskMetrics>,
}

/// Runs every subtask of the job concurrently, a task that fails (also one that cannot be
/// created) among them: how each ended.
pub async fn run_tasks(job: &BuiltJob, buffer_size: usize, timeout: Option<Duration>) -> Vec<TaskRun> {
    let g = job.job_graph();
    // Per data set, per consumer subtask: a channel.
    let mut senders: Vec<Vec<mpsc::Sender<Sent>>> = Vec::new();
    let mut receivers: Vec<Vec<Option<mpsc::Receiver<Sent>>>> = Vec::new();
    for ds in g.data_sets() {
        let p = g.vertex(ds.consumer).parallelism;
        let (tx, rx): (Vec<_>, Vec<_>) = (0..p).map(|_| mpsc::channel(8)).unzip();
        senders.push(tx);
        receivers.push(rx.into_iter().map(Some).collect());
    }
    let mut handles = Vec::new();
    for (vi, v) in g.vertices().iter().enumerate() {
        for s in 0..v.parallelism {
            let outputs: Vec<Box<dyn PartitionWriter>> = g
                .outputs(VertexIndex(vi as u32))
                .iter()
                .map(|r| {
                    let to = senders[r.0 as usize].clone();
                    Box::new(MemWriter {
                        from: s as usize,
                        bytes: vec![0; to.len()],
                        to,
                    }) as Box<dyn PartitionWriter>
                })
                .collect();
            let inputs: Vec<Box<dyn InputGate>> = g
                .inputs(VertexIndex(vi as u32))
                .iter()
                .map(|r| {
                    let producers = g.vertex(g.data_sets()[r.0 as usize].producer).parallelism as usize;
                    Box::new(MemGate(
                        receivers[r.0 as usize][s as usize].take().expect("one gate"),
                        producers,
                    )) as Box<dyn InputGate>
                })
                .collect();
            let metrics = Arc::new(TaskMetrics::default());
            let ctx = TaskContext {
                subtask: s,
                parallelism: v.parallelism,
                attempt: 0,
                inputs,
                outputs,
                metrics: metrics.clone(),
                buffer_timeout: timeout,
                buffer_size,
                configuration: job.configuration().clone(),
                ..TaskContext::default()
            };
            let handle = match job.create_task(vi as u32, ctx) {
                Ok(task) => tokio::spawn(async move { task.run().await.map_err(|e| e.to_string()) }),
                Err(e) => tokio::spawn(async move { Err(e.to_string()) }),
            };
            handles.push((vi as u32, s, metrics, handle));
        }
    }
    drop(senders);
    let mut runs = Vec::new();
    for (vertex, subtask, metrics, h) in handles {
        runs.push(TaskRun {
            vertex,
            subtask,
            result: h.await.expect("join"),
            metrics,
        });
    }
    runs
}

pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("floe-ds-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// A `file://` URL of `dir`.
pub fn url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// Every line of every part file under `dir`, counted.
pub fn lines(dir: &Path) -> HashMap<String, usize> {
    let mut got = HashMap::new();
    for e in std::fs::read_dir(dir).expect("output") {
        for line in std::fs::read_to_string(e.expect("entry").path())
            .expect("read")
            .lines()
        {
            *got.entry(line.to_string()).or_default() += 1;
        }
    }
    got
}

/// `items` counted, to compare with [`lines`].
pub fn counted(items: impl IntoIterator<Item = String>) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for i in items {
        *m.entry(i).or_default() += 1;
    }
    m
}
