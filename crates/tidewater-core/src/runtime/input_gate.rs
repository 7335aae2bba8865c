//! The inputs of a task, read fairly, with barrier alignment.
//!
//! Once `Barrier(n)` arrives on an input, that input is not read again until
//! `Barrier(n)` arrived on every other open input; then the gate yields the
//! barrier once. So a task's snapshot at n covers exactly the rows every
//! upstream emitted before its barrier n.

use std::future::poll_fn;
use std::task::{Context, Poll};

use arrow::record_batch::RecordBatch;
use tokio::sync::mpsc::Receiver;

use super::message::Message;
use crate::error::{Error, Result};
use crate::ids::CheckpointId;

/// What a task sees next.
#[derive(Debug)]
pub(crate) enum GateEvent {
    Batch(RecordBatch),
    /// All inputs delivered this barrier.
    Barrier(CheckpointId),
    /// All inputs ended.
    End(CheckpointId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputState {
    Open,
    Blocked,
    Ended,
}

pub(crate) struct InputGate {
    inputs: Vec<Receiver<Message>>,
    states: Vec<InputState>,
    aligning: Option<CheckpointId>,
    end: Option<CheckpointId>,
    next: usize,
}

impl InputGate {
    pub fn new(inputs: Vec<Receiver<Message>>) -> Self {
        let states = vec![InputState::Open; inputs.len()];
        InputGate {
            inputs,
            states,
            aligning: None,
            end: None,
            next: 0,
        }
    }

    pub async fn next(&mut self) -> Result<GateEvent> {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<GateEvent>> {
        'scan: loop {
            if let Some(event) = self.settled() {
                return Poll::Ready(event);
            }
            let n = self.inputs.len();
            for offset in 0..n {
                let i = (self.next + offset) % n;
                if self.states[i] != InputState::Open {
                    continue;
                }
                match self.inputs[i].poll_recv(cx) {
                    Poll::Pending => {}
                    Poll::Ready(Some(Message::Batch(batch))) => {
                        self.next = (i + 1) % n;
                        return Poll::Ready(Ok(GateEvent::Batch(batch)));
                    }
                    Poll::Ready(Some(Message::Barrier(id))) => {
                        match self.aligning {
                            None => self.aligning = Some(id),
                            Some(current) if current == id => {}
                            Some(current) => {
                                return Poll::Ready(Err(Error::Internal(format!(
                                    "barrier {id} arrived while aligning barrier {current}"
                                ))));
                            }
                        }
                        self.states[i] = InputState::Blocked;
                        continue 'scan;
                    }
                    Poll::Ready(Some(Message::End(id))) => {
                        self.states[i] = InputState::Ended;
                        self.end = Some(id);
                        continue 'scan;
                    }
                    Poll::Ready(None) => {
                        return Poll::Ready(Err(Error::Stopped(
                            "an upstream task stopped without ending its output".into(),
                        )));
                    }
                }
            }
            return Poll::Pending;
        }
    }

    /// A barrier whose alignment completed, or the end of all inputs.
    fn settled(&mut self) -> Option<Result<GateEvent>> {
        if self.states.contains(&InputState::Open) {
            return None;
        }
        if let Some(id) = self.aligning.take() {
            for state in &mut self.states {
                if *state == InputState::Blocked {
                    *state = InputState::Open;
                }
            }
            return Some(Ok(GateEvent::Barrier(id)));
        }
        // Every input ended (a gate with no inputs never yields).
        self.end.map(|id| Ok(GateEvent::End(id)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::Int64Type;
    use tokio::sync::mpsc::channel;

    use super::*;

    fn batch(v: i64) -> Message {
        Message::Batch(
            RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![v])) as _)]).unwrap(),
        )
    }

    fn value(event: &GateEvent) -> i64 {
        match event {
            GateEvent::Batch(b) => b.column(0).as_primitive::<Int64Type>().value(0),
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_input_past_its_barrier_is_held_until_all_inputs_align() {
        let (a_tx, a_rx) = channel(16);
        let (b_tx, b_rx) = channel(16);
        let (c_tx, c_rx) = channel(16);
        let mut gate = InputGate::new(vec![a_rx, b_rx, c_rx]);
        let id = CheckpointId(1);

        // a: 1, |1|, 10 (post-barrier)   b: 2, 3, |1|   c: |1|, 20 (post-barrier)
        for m in [batch(1), Message::Barrier(id), batch(10)] {
            a_tx.send(m).await.unwrap();
        }
        c_tx.send(Message::Barrier(id)).await.unwrap();
        c_tx.send(batch(20)).await.unwrap();
        b_tx.send(batch(2)).await.unwrap();

        // Before b's barrier: only pre-barrier rows of a and b.
        let mut before = vec![];
        for _ in 0..2 {
            before.push(value(&gate.next().await.unwrap()));
        }
        before.sort();
        assert_eq!(before, vec![1, 2]);
        // b is the only open input; nothing else is readable until it delivers.
        let pending = tokio::time::timeout(std::time::Duration::from_millis(50), gate.next()).await;
        assert!(
            pending.is_err(),
            "post-barrier rows must not pass before alignment"
        );

        b_tx.send(batch(3)).await.unwrap();
        assert_eq!(value(&gate.next().await.unwrap()), 3);
        b_tx.send(Message::Barrier(id)).await.unwrap();
        assert!(matches!(gate.next().await.unwrap(), GateEvent::Barrier(i) if i == id));

        // After the barrier: the held rows flow.
        let mut after = vec![];
        for _ in 0..2 {
            after.push(value(&gate.next().await.unwrap()));
        }
        after.sort();
        assert_eq!(after, vec![10, 20]);
    }

    #[tokio::test]
    async fn end_on_one_input_completes_an_alignment_and_all_ends_end_the_gate() {
        let (a_tx, a_rx) = channel(16);
        let (b_tx, b_rx) = channel(16);
        let mut gate = InputGate::new(vec![a_rx, b_rx]);
        a_tx.send(Message::Barrier(CheckpointId(4))).await.unwrap();
        b_tx.send(Message::End(CheckpointId(5))).await.unwrap();
        assert!(matches!(
            gate.next().await.unwrap(),
            GateEvent::Barrier(CheckpointId(4))
        ));
        a_tx.send(Message::End(CheckpointId(5))).await.unwrap();
        assert!(matches!(
            gate.next().await.unwrap(),
            GateEvent::End(CheckpointId(5))
        ));
    }

    #[tokio::test]
    async fn a_vanished_upstream_is_an_error_not_an_end() {
        let (a_tx, a_rx) = channel::<Message>(16);
        let mut gate = InputGate::new(vec![a_rx]);
        drop(a_tx);
        assert!(matches!(gate.next().await, Err(Error::Stopped(_))));
    }
}
