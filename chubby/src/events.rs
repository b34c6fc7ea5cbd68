//! Event subscriptions. Events are sent while the cell's mutex is held, so
//! every subscriber sees them in the order the changes happened. Channels are
//! unbounded (a send never blocks the cell); a dropped receiver is pruned at
//! the next send to its node.

use std::collections::HashMap;

use crossbeam_channel::{unbounded, Receiver, Sender};

use crate::types::{Event, NodeId, WatchEvent};

#[derive(Debug, Default)]
pub struct Events {
    subs: HashMap<NodeId, Vec<Sender<Event>>>,
    watchers: Vec<Sender<WatchEvent>>,
}

impl Events {
    pub fn subscribe(&mut self, node: NodeId) -> Receiver<Event> {
        let (tx, rx) = unbounded();
        self.subs.entry(node).or_default().push(tx);
        rx
    }

    pub fn watch_all(&mut self) -> Receiver<WatchEvent> {
        let (tx, rx) = unbounded();
        self.watchers.push(tx);
        rx
    }

    /// Whether anyone listens to `node` (to skip computing paths for nothing).
    pub fn wanted(&self, node: NodeId) -> bool {
        !self.watchers.is_empty() || self.subs.contains_key(&node)
    }

    /// Sends `event` about `node`, whose current path is `path`.
    pub fn emit(&mut self, node: NodeId, path: &str, event: Event) {
        if let Some(list) = self.subs.get_mut(&node) {
            list.retain(|tx| tx.send(event.clone()).is_ok());
            if list.is_empty() || event == Event::Deleted {
                // After Deleted the node is gone: dropping the senders closes the channels.
                self.subs.remove(&node);
            }
        }
        if !self.watchers.is_empty() {
            let we = WatchEvent {
                id: node,
                path: path.to_string(),
                event,
            };
            self.watchers.retain(|tx| tx.send(we.clone()).is_ok());
        }
    }

    pub fn subscriber_count(&self) -> usize {
        self.subs.values().map(Vec::len).sum::<usize>() + self.watchers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivers_in_order_and_prunes_dropped_receivers() {
        let mut ev = Events::default();
        let rx = ev.subscribe(3);
        let gone = ev.subscribe(3);
        drop(gone);
        let all = ev.watch_all();
        ev.emit(3, "/a", Event::ContentsChanged);
        ev.emit(4, "/b", Event::ChildAdded("x".into()));
        ev.emit(3, "/a", Event::Deleted);
        assert_eq!(
            rx.try_iter().collect::<Vec<_>>(),
            vec![Event::ContentsChanged, Event::Deleted]
        );
        // Deleted closed the channel.
        assert!(rx.recv().is_err());
        let paths: Vec<String> = all.try_iter().map(|w| w.path).collect();
        assert_eq!(paths, vec!["/a", "/b", "/a"]);
        assert_eq!(ev.subscriber_count(), 1);
    }
}
