//! `map`, `flat_map` and `filter` with rich functions (Flink's `RichMapFunction`, ...): each
//! subtask copies the function, opens it with its [`crate::RuntimeContext`] before its first
//! record, and closes it when it ends (see `crate::operators::rich`); `add_sink` with a
//! [`RichSinkFunction`].

use super::*;
use crate::FunctionResult;
use crate::connector::frames;

use crate::operators::{
    Call, Opened, Prototype, RichFilterFunction, RichFlatMapFunction, RichMapFunction, RichOp,
    RichSinkFunction, RuntimeContext, filter_call, flat_map_call, map_call,
};
use async_trait::async_trait;
use bytes::Bytes;

impl<T: Data> DataStream<T> {
    /// [`DataStream::map`] with a [`RichMapFunction`]: `open` once per subtask, `map` per record
    /// (an error fails the task), `close` at the end.
    pub fn map_rich<O: Data, F: RichMapFunction<T, O>>(&self, f: F) -> DataStream<O> {
        self.rich(("map", "Map", "map"), f, F::open, F::close, map_call::<T, O, F>)
    }

    /// [`DataStream::flat_map`] with a [`RichFlatMapFunction`].
    pub fn flat_map_rich<O: Data, F: RichFlatMapFunction<T, O>>(&self, f: F) -> DataStream<O> {
        self.rich(
            ("flat-map", "FlatMap", "flat_map"),
            f,
            F::open,
            F::close,
            flat_map_call::<T, O, F>,
        )
    }

    /// [`DataStream::filter`] with a [`RichFilterFunction`].
    pub fn filter_rich<F: RichFilterFunction<T>>(&self, f: F) -> DataStream<T> {
        self.rich(
            ("filter", "Filter", "filter"),
            f,
            F::open,
            F::close,
            filter_call::<T, F>,
        )
    }

    /// The operator that copies `f` for each subtask, opens it, `call`s it per record and closes
    /// it; `(id, name, call name)` name the operator and the call in errors.
    fn rich<O: Data, F: Clone + Send + 'static>(
        &self,
        (id, name, call_name): (&'static str, &'static str, &'static str),
        f: F,
        open: fn(&mut F, &RuntimeContext) -> FunctionResult,
        close: fn(&mut F) -> FunctionResult,
        call: Call<F, T, O>,
    ) -> DataStream<O> {
        let prototype = Arc::new(Prototype::new(f));
        let factory: OpFactory = Arc::new(move |ctx: &OpContext, down: AnyOp| {
            let down = downcast::<O>(down)?;
            let f = Opened::open(prototype.copy(), ctx, open, close)?;
            Ok(erase::<T>(Box::new(RichOp {
                f,
                call,
                call_name,
                failure: None,
                down,
            })))
        });
        self.add_operator(id, name, Par::Default, self.plain_input(), factory)
    }
}

impl<T: Data> DataStream<T> {
    /// A sink of the job's own (Flink's `addSink(RichSinkFunction)`): each subtask opens its copy
    /// of `f`, `invoke`s it per record, `flush`es it at every checkpoint barrier and at the end,
    /// and closes it. At-least-once (see [`RichSinkFunction`]). Records reach the function on the
    /// task's sink thread, as the built-in sinks' writers do, after their encoding into frames.
    pub fn add_sink<F: RichSinkFunction<T>>(&self, f: F) -> DataStreamSink {
        let prototype = Arc::new(Prototype::new(f));
        let encode: crate::connector::Encoder<T> = Arc::new(|r: &T, out: &mut Vec<u8>| r.encode(out));
        let factory: SinkFactory = Arc::new(move |ctx: &OpContext, metrics: Arc<TaskMetrics>| {
            let op = io::framed_sink_op(encode.clone(), 64 << 10, metrics);
            let f = Opened::open(prototype.copy(), ctx, F::open, F::close)?;
            let writer = FunctionSink::<T, F> { f, _t: PhantomData };
            Ok((erase::<T>(op), Box::new(writer) as Box<dyn SinkIo>))
        });
        self.push_sink("Sink: Function", factory)
    }
}

/// The writer of [`DataStream::add_sink`]: decodes the frames and hands the records over.
struct FunctionSink<T, F> {
    f: Opened<F>,
    _t: PhantomData<fn(T)>,
}

impl<T: Data, F: RichSinkFunction<T>> FunctionSink<T, F> {
    fn flush(&mut self) -> Result<()> {
        self.f
            .flush()
            .map_err(|e| Error::Operator(self.f.failed("flush", e)))
    }
}

#[async_trait]
impl<T: Data, F: RichSinkFunction<T>> SinkIo for FunctionSink<T, F> {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        for mut frame in frames(&bytes) {
            let record = T::decode(&mut frame)?;
            self.f
                .invoke(record)
                .map_err(|e| Error::Operator(self.f.failed("invoke", e)))?;
        }
        Ok(())
    }

    async fn pre_commit(&mut self, _checkpoint: u64) -> Result<Option<String>> {
        self.flush()?;
        Ok(None)
    }

    async fn close(mut self: Box<Self>) -> Result<()> {
        self.flush()?;
        self.f.close().map_err(Error::Operator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::write_frame;

    /// Logs every call: what the writer did, in order.
    #[derive(Clone)]
    struct Logged {
        log: Arc<Mutex<Vec<String>>>,
        fail_at: Option<u64>,
    }

    impl RichSinkFunction<u64> for Logged {
        fn open(&mut self, ctx: &RuntimeContext) -> FunctionResult {
            self.push(format!("open {}", ctx.index_of_this_subtask()));
            Ok(())
        }
        fn invoke(&mut self, value: u64) -> FunctionResult {
            if Some(value) == self.fail_at {
                return Err(format!("cannot write {value}").into());
            }
            self.push(format!("invoke {value}"));
            Ok(())
        }
        fn flush(&mut self) -> FunctionResult {
            self.push("flush".into());
            Ok(())
        }
        fn close(&mut self) -> FunctionResult {
            self.push("close".into());
            Ok(())
        }
    }

    impl Logged {
        fn push(&self, event: String) {
            self.log.lock().unwrap().push(event);
        }
    }

    fn chunk(records: &[u64]) -> Bytes {
        let mut buffer = Vec::new();
        for r in records {
            write_frame(&mut buffer, |out| r.encode(out));
        }
        Bytes::from(buffer)
    }

    fn writer(f: Logged, subtask: u32) -> Box<FunctionSink<u64, Logged>> {
        let ctx = crate::io::tests::sink_context_in("job1", subtask, None);
        let f = Opened::open(f, &ctx, Logged::open, Logged::close).unwrap();
        Box::new(FunctionSink { f, _t: PhantomData })
    }

    #[tokio::test]
    async fn a_checkpoint_barrier_flushes_what_came_before_it_and_the_end_flushes_then_closes() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut w = writer(
            Logged {
                log: log.clone(),
                fail_at: None,
            },
            2,
        );
        w.write(chunk(&[1, 2])).await.unwrap();
        assert_eq!(w.pre_commit(1).await.unwrap(), None);
        w.write(chunk(&[3])).await.unwrap();
        w.close().await.unwrap();
        assert_eq!(
            *log.lock().unwrap(),
            [
                "open 2", "invoke 1", "invoke 2", "flush", "invoke 3", "flush", "close"
            ]
        );
    }

    #[tokio::test]
    async fn an_invoke_that_fails_names_the_sink_and_the_function_is_closed_once() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut w = writer(
            Logged {
                log: log.clone(),
                fail_at: Some(2),
            },
            0,
        );
        let e = w.write(chunk(&[1, 2, 3])).await.unwrap_err();
        assert_eq!(e.to_string(), "Sink: invoke failed: cannot write 2");
        drop(w); // the failed task drops its writer
        assert_eq!(*log.lock().unwrap(), ["open 0", "invoke 1", "close"]);
    }
}
