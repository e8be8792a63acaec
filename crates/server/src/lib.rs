//! `apiary serve`: the live scheduler. The same [`apiary_policy::Policy`] implementations
//! the simulator runs decide here, on wall-clock time, over nodes whose agents run the
//! jobs; every accepted job is durable in an [`apiary_store::Store`] before the API
//! answers.
//!
//! [`core`] is the state machine (no I/O, no clock); [`service`] owns it in one task that
//! applies requests in batches, persists each batch in one store transaction, and only
//! then answers; [`http`] is the JSON API, [`ui`] the dashboard, [`auth`] who may call them.
//! [`extender`] is the other way to serve: HiveD behind a stock kube-scheduler.

pub mod archive;
pub mod auth;
pub mod carbon;
pub mod config;
pub mod core;
pub mod extender;
pub mod http;
#[cfg(feature = "etcd")]
pub mod leader;
pub mod service;
pub mod simulated;
pub mod types;
pub mod ui;
