//! The connection a store's calls go through: to one server (reconnected
//! by the connection manager), or into a cluster, to the primary that
//! serves the namespace's hash slot.
//!
//! Why every command of a cluster store goes to one slot's primary, keyless
//! ones too: a namespace lives in one slot (see [`crate::cluster`]), so
//! `SCAN` must walk that node's keys, `INFO` and `CONFIG GET` must describe
//! the node that keeps the namespace, `WAIT` must count that node's
//! replicas, and the function library must be on the node the `FCALL`s
//! reach (it is loaded again there when the slot moves, as after any
//! server's loss of it).

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// A store's connection (cheap to clone: clones share it).
#[derive(Clone)]
pub(crate) enum Connection {
    /// One server, or the primary Sentinels named.
    Server(ConnectionManager),
    /// A cluster, every command sent to the primary of `slot`.
    Cluster {
        connection: ClusterConnection,
        slot: Route,
    },
}

impl Connection {
    /// Into `cluster`, every command to the primary serving the slot of
    /// `key`.
    pub(crate) fn into_cluster(connection: ClusterConnection, key: &str) -> Self {
        Connection::Cluster {
            connection,
            slot: Route::with_key(key, SlotAddr::Master),
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Server(connection) => connection.req_packed_command(cmd),
            Connection::Cluster { connection, slot } => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(*slot));
                Box::pin(connection.route_command(cmd.clone(), routing))
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Server(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Connection::Cluster { connection, slot } => Box::pin(connection.route_pipeline(
                pipeline.clone(),
                offset,
                count,
                SingleNodeRoutingInfo::SpecificNode(*slot),
            )),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Server(connection) => connection.get_db(),
            Connection::Cluster { .. } => 0,
        }
    }
}
