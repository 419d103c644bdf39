//! Task threads: every execution runs on a thread of its own (Flink's task thread), driving the
//! task's async chain on a single-threaded runtime private to it. The TaskManager's RPC service,
//! heartbeats, state reports and shuffle network streams stay on the process runtime, so a user
//! function that blocks (a synchronous client call, a long computation, a sleep) or a RocksDB call
//! delays only its own task, never the heartbeat that keeps the TaskManager alive.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use tokio::sync::watch;

/// Cancels a task thread: its chain is dropped at its next await point (a blocked user function
/// returns first, as a Flink task thread finishes the call it is in before it sees the interrupt).
#[derive(Debug, Clone)]
pub(crate) struct TaskThread {
    cancel: watch::Sender<bool>,
}

impl TaskThread {
    /// Starts `body` on a new thread named `name`. `on_panic` runs (on that thread) with the panic's
    /// message if the body or the runtime panics, so the task is reported FAILED rather than lost;
    /// `on_canceled` runs when [`TaskThread::abort`] dropped the body.
    pub(crate) fn spawn<F>(
        name: String,
        body: F,
        on_panic: impl FnOnce(String) + Send + 'static,
    ) -> std::io::Result<TaskThread>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (cancel, mut canceled) = watch::channel(false);
        std::thread::Builder::new().name(name).spawn(move || {
            let run = AssertUnwindSafe(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start the task's runtime: {e}"))?;
                runtime.block_on(async move {
                    // Only an abort stops the body: a handle dropped (its table entry gone)
                    // cancels nothing.
                    let aborted = async {
                        if canceled.wait_for(|c| *c).await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    };
                    tokio::select! {
                        biased;
                        () = aborted => {}
                        () = body => {}
                    }
                });
                Ok::<(), String>(())
            });
            let failure = match std::panic::catch_unwind(run) {
                Ok(Ok(())) => return,
                Ok(Err(message)) => message,
                Err(panic) => format!("task panicked: {}", panic_message(panic.as_ref())),
            };
            on_panic(failure);
        })?;
        Ok(TaskThread { cancel })
    }

    /// Stops the task at its next await point.
    pub(crate) fn abort(&self) {
        let _ = self.cancel.send(true);
    }

    /// A handle that cancels nothing: for table entries of tests.
    #[cfg(test)]
    pub(crate) fn detached() -> TaskThread {
        TaskThread {
            cancel: watch::channel(false).0,
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_task_runs_on_its_own_named_thread() {
        let (tx, rx) = mpsc::channel();
        TaskThread::spawn(
            "task-x".into(),
            async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _ = tx.send(std::thread::current().name().map(str::to_string));
            },
            |_| {},
        )
        .expect("spawn");
        let name = rx.recv_timeout(Duration::from_secs(5)).expect("ran");
        assert_eq!(name.as_deref(), Some("task-x"));
    }

    #[test]
    fn a_panicking_task_is_reported_with_its_message() {
        let (tx, rx) = mpsc::channel();
        TaskThread::spawn(
            "task-panics".into(),
            async { panic!("user function failed on record 7") },
            move |m| {
                let _ = tx.send(m);
            },
        )
        .expect("spawn");
        let message = rx.recv_timeout(Duration::from_secs(5)).expect("reported");
        assert!(message.contains("user function failed on record 7"), "{message}");
    }

    #[test]
    fn abort_drops_the_task_at_its_next_await() {
        struct Dropped(mpsc::Sender<()>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let (tx, rx) = mpsc::channel();
        let thread = TaskThread::spawn(
            "task-cancel".into(),
            async move {
                let _guard = Dropped(tx);
                std::future::pending::<()>().await;
            },
            |_| {},
        )
        .expect("spawn");
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "still running"
        );
        thread.abort();
        rx.recv_timeout(Duration::from_secs(5))
            .expect("dropped after abort");
    }
}
