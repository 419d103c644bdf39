//! A task's head: where its chain's records come from, an input gate's buffers decoded per
//! record type ([`InputHead`]) or a source's batches ([`SourceHead`]), behind the [`Head`] trait
//! the task loop drives; and the per-type operations ([`StreamType`], [`TwoInputType`]) erased
//! once per stream node.

use super::*;

/// Operations on a stream's record type, erased once per stream node.
pub(crate) trait StreamType: Send + Sync {
    /// The tail of a chain writing the vertex outputs `routes`.
    fn writer(&self, routes: &[OutputRoute], setup: &WriterSetup) -> Result<AnyOp>;
    /// An operator's writer of one side output, read by the vertex outputs `routes`.
    fn side_writer(&self, routes: &[OutputRoute], setup: &WriterSetup) -> Result<Box<dyn SideOutput>>;
    /// The decoder of a vertex input of `channels` channels (their watermarks combine).
    fn input_head(
        &self,
        chain: AnyOp,
        metrics: Arc<TaskMetrics>,
        time: Option<Arc<TaskTime>>,
        channels: usize,
    ) -> Result<Box<dyn Head>>;
}

pub(crate) struct TypeOf<T>(pub PhantomData<fn() -> T>);

/// The input side of a two-input operator: its channels carry records of its first input's type
/// or of its second's, and the operator takes both as one [`TaggedUnion`] stream.
pub(crate) trait TwoInputType: Send + Sync {
    /// The decoder of the operator's input gates; `sides[channel]` says which input a channel
    /// (numbered across the gates) feeds.
    fn input_head(
        &self,
        chain: AnyOp,
        metrics: Arc<TaskMetrics>,
        time: Option<Arc<TaskTime>>,
        sides: Vec<u8>,
    ) -> Result<Box<dyn Head>>;
}

pub(crate) struct TwoInputOf<A, B>(pub PhantomData<fn() -> (A, B)>);

fn decode_side<A: Data, B: Data>(side: u8, input: &mut &[u8]) -> Result<TaggedUnion<A, B>> {
    Ok(match side {
        0 => TaggedUnion::One(A::decode(input)?),
        _ => TaggedUnion::Two(B::decode(input)?),
    })
}

impl<A: Data, B: Data> TwoInputType for TwoInputOf<A, B> {
    fn input_head(
        &self,
        chain: AnyOp,
        metrics: Arc<TaskMetrics>,
        time: Option<Arc<TaskTime>>,
        sides: Vec<u8>,
    ) -> Result<Box<dyn Head>> {
        // One valve over the channels of both inputs: the minimum over them is the minimum of the
        // two inputs' watermarks, and an idle input drops out of it as an idle channel does.
        let time = time.map(|t| (t, WatermarkValve::new(sides.len().max(1))));
        let mut head = InputHead::new(downcast::<TaggedUnion<A, B>>(chain)?, metrics, time);
        head.sides = Some((sides, decode_side::<A, B>));
        Ok(Box::new(head))
    }
}

impl<T: Data> StreamType for TypeOf<T> {
    fn writer(&self, routes: &[OutputRoute], setup: &WriterSetup) -> Result<AnyOp> {
        Ok(erase::<T>(Box::new(RecordWriter::<T>::new(routes, setup)?)))
    }

    fn side_writer(&self, routes: &[OutputRoute], setup: &WriterSetup) -> Result<Box<dyn SideOutput>> {
        Ok(Box::new(SideWriter::<T>(Box::new(RecordWriter::<T>::new(
            routes, setup,
        )?))))
    }

    fn input_head(
        &self,
        chain: AnyOp,
        metrics: Arc<TaskMetrics>,
        time: Option<Arc<TaskTime>>,
        channels: usize,
    ) -> Result<Box<dyn Head>> {
        let time = time.map(|t| (t, WatermarkValve::new(channels)));
        Ok(Box::new(InputHead::new(downcast::<T>(chain)?, metrics, time)))
    }
}

/// The start of a chain: a source, or the decoder of an input gate's buffers.
#[async_trait]
pub(crate) trait Head: Send {
    /// Sources: push the next batch; `Ok(false)` when exhausted.
    async fn produce(&mut self) -> Result<bool>;
    /// Inputs: decode one buffer's records (and, in a timed job, its time events) into the chain.
    fn push_buffer(&mut self, channel: usize, buffer: &[u8]) -> Result<()>;
    /// A time event for the whole chain: a processing-time tick, end of input's MAX watermark.
    fn on_time(&mut self, event: TimeEvent);
    fn finish(&mut self);
    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>);
    /// The chain's snapshot (and a source's position) at a barrier, between batches.
    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()>;
    fn failure(&mut self) -> Option<String>;
    /// An async operator heading the chain: see [`crate::operators::Op::poll_async`].
    fn poll_async(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let _ = cx;
        std::task::Poll::Pending
    }
    /// See [`crate::operators::Op::async_blocked`].
    fn async_blocked(&self) -> bool {
        false
    }
    /// See [`crate::operators::Op::async_busy`].
    fn async_busy(&self) -> bool {
        false
    }
    /// Checkpoint `checkpoint` completed: a source acts on what it snapshotted for it (and for
    /// earlier ones), e.g. commits its offsets.
    async fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        let _ = checkpoint;
        Ok(())
    }
    /// The task ends: a source finishes what it has in flight (see [`crate::io::Source::close`]).
    async fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

pub(crate) struct InputHead<T> {
    chain: BoxOp<T>,
    metrics: Arc<TaskMetrics>,
    /// The chain takes borrowed records: each one is decoded into `record`, reusing its buffers.
    reuse: bool,
    record: Option<T>,
    /// A timed job: the task's record timestamp and how its channels' watermarks combine.
    time: Option<(Arc<TaskTime>, WatermarkValve)>,
    events: Vec<TimeEvent>,
    /// A two-input operator's head: the input of each channel and how its records decode.
    sides: Option<(Vec<u8>, SideDecoder<T>)>,
}

type SideDecoder<T> = fn(u8, &mut &[u8]) -> Result<T>;

impl<T: Data> InputHead<T> {
    fn new(
        chain: BoxOp<T>,
        metrics: Arc<TaskMetrics>,
        time: Option<(Arc<TaskTime>, WatermarkValve)>,
    ) -> Self {
        InputHead {
            reuse: chain.takes_reused(),
            chain,
            metrics,
            record: None,
            time,
            events: Vec::new(),
            sides: None,
        }
    }

    #[inline]
    fn push_record(&mut self, input: &mut &[u8]) -> Result<()> {
        if self.reuse {
            let record = match &mut self.record {
                Some(record) => {
                    record.decode_into(input)?;
                    record
                }
                None => self.record.insert(T::decode(input)?),
            };
            self.chain.collect_reused(record);
        } else {
            self.chain.collect(T::decode(input)?);
        }
        Ok(())
    }

    /// A time event from channel `channel`: what the valve lets through goes down the chain.
    fn channel_event(&mut self, channel: usize, event: TimeEvent) {
        let Some((_, valve)) = self.time.as_mut() else {
            return;
        };
        valve.input(channel, event, &mut self.events);
        let watermark = valve.current();
        for event in self.events.drain(..) {
            if let TimeEvent::Watermark(_) = event {
                self.metrics.set_watermark(watermark);
            }
            self.chain.on_time(event);
        }
    }
}

#[async_trait]
impl<T: Data> Head for InputHead<T> {
    async fn produce(&mut self) -> Result<bool> {
        Err(Error::Graph("an input-fed chain has no source".into()))
    }

    fn push_buffer(&mut self, channel: usize, buffer: &[u8]) -> Result<()> {
        self.metrics.add_bytes_in(buffer.len());
        let mut input = buffer;
        let mut n = 0u64;
        let side = match &self.sides {
            Some((sides, decode)) => Some((
                *sides.get(channel).ok_or_else(|| {
                    Error::Graph(format!(
                        "channel {channel} of a two-input task with {}",
                        sides.len()
                    ))
                })?,
                *decode,
            )),
            None => None,
        };
        if let Some((time, _)) = &self.time {
            let time = time.clone();
            while !input.is_empty() {
                match element::read_header(&mut input)? {
                    Header::Record(ts) => {
                        time.set_timestamp(ts);
                        match side {
                            Some((side, decode)) => self.chain.collect(decode(side, &mut input)?),
                            None => self.push_record(&mut input)?,
                        }
                        n += 1;
                    }
                    Header::Event(event) => self.channel_event(channel, event),
                }
            }
        } else if let Some((side, decode)) = side {
            while !input.is_empty() {
                self.chain.collect(decode(side, &mut input)?);
                n += 1;
            }
        } else {
            // The one-input path, per record as lean as before two-input heads existed.
            while !input.is_empty() {
                self.push_record(&mut input)?;
                n += 1;
            }
        }
        self.metrics.add_in(n);
        Ok(())
    }

    fn on_time(&mut self, event: TimeEvent) {
        if let TimeEvent::Watermark(w) = event {
            // End of input: every channel is at the end of event time.
            if self.time.as_ref().is_some_and(|(_, valve)| valve.current() >= w) {
                return;
            }
            self.metrics.set_watermark(w);
        }
        self.chain.on_time(event)
    }

    fn finish(&mut self) {
        self.chain.finish()
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.chain.drain(flush, out)
    }

    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
        self.chain.snapshot(checkpoint, out)
    }

    fn failure(&mut self) -> Option<String> {
        self.chain.failure()
    }

    fn poll_async(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.chain.poll_async(cx)
    }

    fn async_blocked(&self) -> bool {
        self.chain.async_blocked()
    }

    fn async_busy(&self) -> bool {
        self.chain.async_busy()
    }
}

pub(crate) struct SourceHead<T, S> {
    pub source: S,
    pub chain: BoxOp<T>,
    pub metrics: Arc<TaskMetrics>,
    /// The last watermark the source's splits gave (sources that know their event time).
    pub watermark: i64,
    /// Whether the chain was last told the source is idle.
    pub idle: bool,
}

#[async_trait]
impl<T: Data, S: Source<T>> Head for SourceHead<T, S> {
    async fn produce(&mut self) -> Result<bool> {
        let more = self.source.produce(&mut *self.chain).await?;
        let idle = self.source.idle();
        if idle != self.idle {
            self.idle = idle;
            self.chain
                .on_time(if idle { TimeEvent::Idle } else { TimeEvent::Active });
        }
        if let Some(w) = self.source.watermark()
            && w > self.watermark
        {
            self.watermark = w;
            self.metrics.set_watermark(w);
            self.chain.on_time(TimeEvent::Watermark(w));
        }
        if let Some(n) = self.source.pending() {
            self.metrics
                .pending_records
                .store(n, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(more)
    }

    fn push_buffer(&mut self, _: usize, _: &[u8]) -> Result<()> {
        Err(Error::Graph("a source chain has no input".into()))
    }

    fn on_time(&mut self, event: TimeEvent) {
        self.chain.on_time(event)
    }

    fn finish(&mut self) {
        self.chain.finish()
    }

    fn drain(&mut self, flush: bool, out: &mut Vec<Chunk>) {
        self.chain.drain(flush, out)
    }

    fn snapshot(&mut self, checkpoint: u64, out: &mut ChainSnapshot) -> Result<()> {
        out.source = Some(self.source.snapshot(checkpoint));
        self.chain.snapshot(checkpoint, out)
    }

    fn failure(&mut self) -> Option<String> {
        self.chain.failure()
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        self.source.notify_checkpoint_complete(checkpoint).await
    }

    async fn close(&mut self) -> Result<()> {
        self.source.close().await
    }
}
