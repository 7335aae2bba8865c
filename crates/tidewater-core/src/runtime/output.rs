//! Sends a task's output along its edges: forward, by key hash, or round-robin.

use arrow::record_batch::RecordBatch;
use tokio::sync::mpsc::Sender;

use super::message::Message;
use crate::error::{Error, Result};
use crate::partition::{KeyGroups, KeyRouting, partition_batch};
use crate::pipeline::Partitioning;

/// One outgoing edge of a task.
pub(crate) enum Route {
    Forward(Sender<Message>),
    Rebalance {
        senders: Vec<Sender<Message>>,
        next: usize,
    },
    Hash {
        senders: Vec<Sender<Message>>,
        /// Which sender owns each key group.
        groups: KeyGroups,
        columns: Vec<String>,
        /// Key column positions, resolved on the first batch.
        indices: Option<Vec<usize>>,
        scratch: Vec<u64>,
    },
}

fn resolve(
    schema: &arrow::datatypes::Schema,
    columns: &[String],
    what: &str,
) -> Result<Vec<usize>> {
    columns
        .iter()
        .map(|c| {
            schema.index_of(c).map_err(|_| {
                Error::BadInput(format!(
                    "{what} column '{c}' is not in the stream (columns: {})",
                    schema
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
        })
        .collect()
}

impl Route {
    /// A route to `senders` for this task's `subtask`: one sender per
    /// downstream subtask, or the single peer of a forward edge. A hash
    /// route spreads the job's `key_groups` over its senders.
    pub fn new(
        partitioning: &Partitioning,
        mut senders: Vec<Sender<Message>>,
        subtask: usize,
        key_groups: u32,
    ) -> Result<Self> {
        Ok(match partitioning {
            Partitioning::Forward => Route::Forward(senders.swap_remove(subtask)),
            Partitioning::Rebalance => Route::Rebalance {
                senders,
                next: subtask,
            },
            Partitioning::Hash(columns) => Route::Hash {
                groups: KeyGroups::new(key_groups, senders.len())?,
                senders,
                columns: columns.clone(),
                indices: None,
                scratch: Vec::new(),
            },
        })
    }

    fn senders(&self) -> &[Sender<Message>] {
        match self {
            Route::Forward(sender) => std::slice::from_ref(sender),
            Route::Rebalance { senders, .. } | Route::Hash { senders, .. } => senders,
        }
    }

    /// Sends `batch` on; `routed_to`, the downstream subtask its operator
    /// routed it to by this route's own key routing, spares the hashing.
    async fn send(&mut self, batch: RecordBatch, routed_to: Option<usize>) -> Result<()> {
        if let (Route::Hash { senders, .. }, Some(to)) = (&*self, routed_to)
            && let Some(sender) = senders.get(to)
        {
            return deliver(sender, Message::Batch(batch)).await;
        }
        match self {
            Route::Forward(sender) => deliver(sender, Message::Batch(batch)).await,
            Route::Rebalance { senders, next } => {
                *next = (*next + 1) % senders.len();
                deliver(&senders[*next], Message::Batch(batch)).await
            }
            // One downstream subtask owns every key: nothing to hash.
            Route::Hash { senders, .. } if senders.len() == 1 => {
                deliver(&senders[0], Message::Batch(batch)).await
            }
            Route::Hash {
                senders,
                groups,
                columns,
                indices,
                scratch,
            } => {
                if indices.is_none() {
                    *indices = Some(resolve(&batch.schema(), columns, "key_by")?);
                }
                let parts = partition_batch(
                    &batch,
                    indices.as_deref().unwrap_or_default(),
                    groups,
                    scratch,
                )?;
                for (part, sender) in parts.into_iter().zip(senders.iter()) {
                    if let Some(part) = part {
                        deliver(sender, Message::Batch(part)).await?;
                    }
                }
                Ok(())
            }
        }
    }
}

async fn deliver(sender: &Sender<Message>, message: Message) -> Result<()> {
    sender
        .send(message)
        .await
        .map_err(|_| Error::Stopped("a downstream task stopped".into()))
}

/// All outgoing edges of a task.
pub(crate) struct Output {
    routes: Vec<Route>,
}

impl Output {
    pub fn new(routes: Vec<Route>) -> Self {
        Output { routes }
    }

    /// How the task's output is routed by key, when it crosses exactly one
    /// edge and that edge is hash-partitioned: an operator that emits
    /// batches routed by it ([`send`](Self::send)'s `routed_to`) spares the
    /// edge its hashing.
    pub fn key_routing(&self) -> Option<KeyRouting> {
        match self.routes.as_slice() {
            [
                Route::Hash {
                    groups, columns, ..
                },
            ] => Some(KeyRouting {
                columns: columns.clone(),
                groups: groups.clone(),
            }),
            _ => None,
        }
    }

    /// Sends a batch along every edge; `routed_to` is the downstream
    /// subtask of every row of it under [`key_routing`](Self::key_routing),
    /// when the operator that emitted it worked that out.
    pub async fn send(&mut self, batch: RecordBatch, routed_to: Option<usize>) -> Result<()> {
        if let [route] = self.routes.as_mut_slice() {
            return route.send(batch, routed_to).await;
        }
        for route in &mut self.routes {
            route.send(batch.clone(), None).await?;
        }
        Ok(())
    }

    /// Sends a barrier or end marker to every downstream subtask.
    pub async fn broadcast(&mut self, message: Message) -> Result<()> {
        for route in &self.routes {
            for sender in route.senders() {
                deliver(sender, message.clone()).await?;
            }
        }
        Ok(())
    }
}
