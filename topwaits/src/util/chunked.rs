//! A list that grows a chunk at a time, so that adding to it never moves what it
//! already holds: for the events a busy trace keeps until its report.

/// Items per chunk: 4,096 wait events are about half a MiB.
const CHUNK: usize = 4096;

/// Items in the order they were pushed, kept in chunks of [`CHUNK`]. A `Vec`
/// that doubles copies all it holds at each growth: for `why` on a busy
/// machine, up to a million events of 136 bytes, copied again and again.
#[derive(Debug)]
pub struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked { chunks: Vec::new(), len: 0 }
    }
}

impl<T> Chunked<T> {
    pub fn push(&mut self, item: T) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => last.push(item),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(item);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The items, in the order they were pushed.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_across_chunks_and_never_moves_an_item() {
        let mut c = Chunked::default();
        assert!(c.is_empty());
        c.push(0usize);
        let first: *const usize = c.iter().next().unwrap();
        for i in 1..3 * CHUNK + 5 {
            c.push(i);
        }
        assert_eq!(c.len(), 3 * CHUNK + 5);
        assert!(c.iter().copied().eq(0..3 * CHUNK + 5));
        assert_eq!(c.chunks.len(), 4);
        assert!(c.chunks.iter().all(|k| k.capacity() == CHUNK));
        assert!(std::ptr::eq(first, c.iter().next().unwrap()), "the first item stayed put");
    }
}
