//! The command-line side of tidewater: what every program that runs a job
//! does around it. [`runner`] parses the common flags (checkpoint interval,
//! parallelism, state, retention, report files), shows progress, turns
//! SIGINT/SIGTERM into a savepoint, writes the status and summary files the
//! benchmarks read, and maps the outcome to an exit code (0 complete, 1
//! failed, 3 cancelled and resumable). The examples use it, and so does the
//! `tidewater` binary: [`spec`] reads TOML specs (every problem at its line
//! and column), [`build`] turns one into a job, [`commands`] are its
//! subcommands.

#[cfg(feature = "specs")]
pub mod build;
#[cfg(feature = "specs")]
pub mod commands;
pub mod events;
#[cfg(feature = "specs")]
pub mod http;
pub mod progress;
pub mod runner;
#[cfg(feature = "specs")]
pub mod spec;
#[cfg(feature = "specs")]
pub mod supervise;
pub mod volume;
