//! The API's wire types are `apiary-api`'s, shared with the clients and the agent.

pub use apiary_api::*;
