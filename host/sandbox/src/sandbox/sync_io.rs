//! `wasi:io/streams` and `wasi:io/poll` for guests, without an async
//! runtime.
//!
//! Why not wasmtime-wasi's own sync bindings: they run every blocking call
//! (`blocking-write-and-flush`, which Rust's `std` uses for every write to
//! stderr, `pollable.block`, a stream's drop) through `in_tokio`, which
//! calls `Handle::block_on` and so panics on a Tokio worker thread. That
//! forced every hook call onto the blocking pool: two thread hand-offs per
//! call, about a third of the runner's CPU (`bench --runner`). The streams
//! a guest is granted (stdout discarded, stderr captured in memory, stdin
//! closed) are always ready, so here a "blocking" call polls its future
//! once; one that is not ready at once would be a wait the guest was never
//! granted, and traps with [`NotGranted`] instead of blocking the thread.
//! With this, a hook may run on any thread, async worker or not.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use wasmtime::component::{HasData, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::sync::io::{poll, streams};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable, StreamError, StreamResult};
use wasmtime_wasi_io::bindings::wasi::io::poll as async_poll;
use wasmtime_wasi_io::bindings::wasi::io::streams::{
    Host as AsyncHost, HostInputStream as AsyncInput, HostOutputStream as AsyncOutput,
};

/// A guest waited on something that was not ready: nothing granted to a
/// guest ever is, so the wait could only have hung the hook.
#[derive(Debug, thiserror::Error)]
#[error(
    "the guest waited on a WASI stream or pollable that is not ready (no blocking I/O is granted)"
)]
pub struct NotGranted;

/// Polls `fut` once: its value if ready, [`NotGranted`] otherwise.
pub(crate) fn ready_now<F: Future>(fut: F) -> Result<F::Output, NotGranted> {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(v) => Ok(v),
        Poll::Pending => Err(NotGranted),
    }
}

/// The guest's I/O table seen through these bindings.
pub(crate) struct SyncIo<'a>(pub(crate) &'a mut ResourceTable);

/// [`HasData`] marker for linking [`SyncIo`].
pub(crate) struct HasSyncIo;

impl HasData for HasSyncIo {
    type Data<'a> = SyncIo<'a>;
}

fn stream_ready<T>(fut: impl Future<Output = StreamResult<T>>) -> StreamResult<T> {
    ready_now(fut).map_err(|e| StreamError::Trap(e.into()))?
}

fn trap_ready<T>(fut: impl Future<Output = wasmtime::Result<T>>) -> wasmtime::Result<T> {
    ready_now(fut)?
}

impl streams::Host for SyncIo<'_> {
    fn convert_stream_error(&mut self, err: StreamError) -> wasmtime::Result<streams::StreamError> {
        Ok(match AsyncHost::convert_stream_error(self.0, err)? {
            wasmtime_wasi_io::bindings::wasi::io::streams::StreamError::LastOperationFailed(e) => {
                streams::StreamError::LastOperationFailed(e)
            }
            wasmtime_wasi_io::bindings::wasi::io::streams::StreamError::Closed => {
                streams::StreamError::Closed
            }
        })
    }
}

impl streams::HostOutputStream for SyncIo<'_> {
    fn drop(&mut self, stream: Resource<DynOutputStream>) -> wasmtime::Result<()> {
        trap_ready(AsyncOutput::drop(self.0, stream))
    }

    fn check_write(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<u64> {
        AsyncOutput::check_write(self.0, stream)
    }

    fn write(&mut self, stream: Resource<DynOutputStream>, bytes: Vec<u8>) -> StreamResult<()> {
        AsyncOutput::write(self.0, stream, bytes)
    }

    fn blocking_write_and_flush(
        &mut self,
        stream: Resource<DynOutputStream>,
        bytes: Vec<u8>,
    ) -> StreamResult<()> {
        stream_ready(AsyncOutput::blocking_write_and_flush(self.0, stream, bytes))
    }

    fn blocking_write_zeroes_and_flush(
        &mut self,
        stream: Resource<DynOutputStream>,
        len: u64,
    ) -> StreamResult<()> {
        stream_ready(AsyncOutput::blocking_write_zeroes_and_flush(
            self.0, stream, len,
        ))
    }

    fn subscribe(
        &mut self,
        stream: Resource<DynOutputStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        AsyncOutput::subscribe(self.0, stream)
    }

    fn write_zeroes(&mut self, stream: Resource<DynOutputStream>, len: u64) -> StreamResult<()> {
        AsyncOutput::write_zeroes(self.0, stream, len)
    }

    fn flush(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<()> {
        AsyncOutput::flush(self.0, stream)
    }

    fn blocking_flush(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<()> {
        stream_ready(AsyncOutput::blocking_flush(self.0, stream))
    }

    fn splice(
        &mut self,
        dst: Resource<DynOutputStream>,
        src: Resource<DynInputStream>,
        len: u64,
    ) -> StreamResult<u64> {
        AsyncOutput::splice(self.0, dst, src, len)
    }

    fn blocking_splice(
        &mut self,
        dst: Resource<DynOutputStream>,
        src: Resource<DynInputStream>,
        len: u64,
    ) -> StreamResult<u64> {
        stream_ready(AsyncOutput::blocking_splice(self.0, dst, src, len))
    }
}

impl streams::HostInputStream for SyncIo<'_> {
    fn drop(&mut self, stream: Resource<DynInputStream>) -> wasmtime::Result<()> {
        trap_ready(AsyncInput::drop(self.0, stream))
    }

    fn read(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<Vec<u8>> {
        AsyncInput::read(self.0, stream, len)
    }

    fn blocking_read(
        &mut self,
        stream: Resource<DynInputStream>,
        len: u64,
    ) -> StreamResult<Vec<u8>> {
        stream_ready(AsyncInput::blocking_read(self.0, stream, len))
    }

    fn skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        AsyncInput::skip(self.0, stream, len)
    }

    fn blocking_skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        stream_ready(AsyncInput::blocking_skip(self.0, stream, len))
    }

    fn subscribe(
        &mut self,
        stream: Resource<DynInputStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        AsyncInput::subscribe(self.0, stream)
    }
}

impl poll::Host for SyncIo<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        trap_ready(async_poll::Host::poll(self.0, pollables))
    }
}

impl poll::HostPollable for SyncIo<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        trap_ready(async_poll::HostPollable::ready(self.0, pollable))
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        trap_ready(async_poll::HostPollable::block(self.0, pollable))
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        async_poll::HostPollable::drop(self.0, pollable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ready_future_gives_its_value_and_a_pending_one_is_not_granted() {
        assert_eq!(ready_now(async { 7 }).unwrap(), 7);
        assert!(ready_now(std::future::pending::<()>()).is_err());
    }
}
