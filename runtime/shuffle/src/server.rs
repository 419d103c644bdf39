//! The `Shuffle` gRPC service: serves this TaskManager's subpartitions to consumers, one stream per
//! subpartition, sending one buffer per credit so a slow consumer stops its producer.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::environment::Shared;
use crate::partition::{ReadItem, SubpartitionReader, lock};
use crate::{Error, ResultPartitionId};
use floe_proto::v1::read_request::Kind;
use floe_proto::v1::shuffle_server::Shuffle;
use floe_proto::v1::{ReadRequest, ShuffleBuffer};

/// What [`crate::ShuffleEnvironment::service`] wraps in a `ShuffleServer`.
#[derive(Debug, Clone)]
pub struct ShuffleService {
    shared: Arc<Shared>,
}

impl ShuffleService {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        ShuffleService { shared }
    }
}

/// The status a consumer sees; [`crate::gate`] maps codes back (NOT_FOUND is retried).
pub(crate) fn to_status(error: &Error) -> Status {
    let message = error.to_string();
    match error {
        Error::PartitionNotFound(_) => Status::not_found(message),
        Error::SubpartitionBusy { .. } => Status::unavailable(message),
        Error::SubpartitionOutOfRange { .. } | Error::InvalidJobId(_) | Error::InvalidRequest(_) => {
            Status::invalid_argument(message)
        }
        Error::Released(_) | Error::AlreadyConsumed { .. } => Status::failed_precondition(message),
        Error::ProducerFailed(_) => Status::aborted(message),
        _ => Status::internal(message),
    }
}

/// One open subpartition stream: credits granted minus buffers sent.
struct ReadState {
    requests: Streaming<ReadRequest>,
    reader: SubpartitionReader,
    credit: u64,
    done: bool,
}

impl ReadState {
    /// The next message, sent only against credit; `None` ends the stream.
    async fn step(mut self) -> Option<(Result<ShuffleBuffer, Status>, Self)> {
        if self.done {
            return None;
        }
        while self.credit == 0 {
            match self.requests.message().await {
                Ok(Some(ReadRequest {
                    kind: Some(Kind::Credit(n)),
                })) => self.credit += u64::from(n),
                Ok(Some(_)) => {
                    self.done = true;
                    let error = Error::InvalidRequest("only credit may follow open".into());
                    return Some((Err(to_status(&error)), self));
                }
                // The consumer went away: nobody to send to.
                Ok(None) | Err(_) => return None,
            }
        }
        let message = match self.reader.next().await {
            Ok(ReadItem::Data(data)) => {
                self.credit -= 1;
                // Zero-copy when the writer's buffer is uniquely owned and Vec-backed.
                Ok(ShuffleBuffer {
                    data,
                    end_of_partition: false,
                    barrier: 0,
                    cancel: 0,
                })
            }
            Ok(ReadItem::Barrier(id)) => {
                self.credit -= 1;
                Ok(ShuffleBuffer {
                    data: bytes::Bytes::new(),
                    end_of_partition: false,
                    barrier: id,
                    cancel: 0,
                })
            }
            Ok(ReadItem::Cancel(id)) => {
                self.credit -= 1;
                Ok(ShuffleBuffer {
                    data: bytes::Bytes::new(),
                    end_of_partition: false,
                    barrier: 0,
                    cancel: id,
                })
            }
            Ok(ReadItem::End) => {
                self.done = true;
                Ok(ShuffleBuffer {
                    data: bytes::Bytes::new(),
                    end_of_partition: true,
                    barrier: 0,
                    cancel: 0,
                })
            }
            Err(error) => {
                self.done = true;
                Err(to_status(&error))
            }
        };
        Some((message, self))
    }
}

type BufferStream = Pin<Box<dyn Stream<Item = Result<ShuffleBuffer, Status>> + Send>>;

#[tonic::async_trait]
impl Shuffle for ShuffleService {
    type ReadSubpartitionStream = BufferStream;

    async fn read_subpartition(
        &self,
        request: Request<Streaming<ReadRequest>>,
    ) -> Result<Response<Self::ReadSubpartitionStream>, Status> {
        let mut requests = request.into_inner();
        let open = match requests.message().await? {
            Some(ReadRequest {
                kind: Some(Kind::Open(open)),
            }) => open,
            _ => {
                return Err(to_status(&Error::InvalidRequest(
                    "a stream must start with open".into(),
                )));
            }
        };
        let id = open
            .partition
            .map(ResultPartitionId::from)
            .ok_or_else(|| to_status(&Error::InvalidRequest("open without partition".into())))?;
        let partition = lock(&self.shared.partitions)
            .get(&id)
            .cloned()
            .ok_or_else(|| to_status(&Error::PartitionNotFound(id.to_string())))?;
        let reader = partition
            .open_reader(open.subpartition)
            .map_err(|e| to_status(&e))?;
        tracing::debug!(partition = %id, subpartition = open.subpartition, "serving subpartition");
        let state = ReadState {
            requests,
            reader,
            credit: u64::from(open.initial_credit),
            done: false,
        };
        let stream = futures::stream::unfold(state, ReadState::step);
        Ok(Response::new(Box::pin(stream)))
    }
}
