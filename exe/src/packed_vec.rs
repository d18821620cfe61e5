//! A short vector in few bytes: [`PackedVec`], for the executable's millions of small lists.
//!
//! A large graph has millions of copies and vertices (the hands-on day's step 2: 10.7 million
//! copies, 83% with one destination; 7.7 million vertices, 93% with at most four operands),
//! so the size of their lists is much of a compile's memory. A `SmallVec` holds its inline
//! items in a union with a pointer and a length, then a `usize` capacity, 8-aligned: two
//! 8-byte destinations took 24 bytes, four 12-byte operands 56. A [`PackedVec`] is
//! 4-aligned: a 32-bit count, then either up to `N` items themselves or a pointer to a heap
//! array of them — 12 bytes for one destination, 52 for four operands. The array's capacity
//! is not stored: it is the count rounded up to a power of two (the count doubles the array
//! when it reaches it, as a `Vec` grows).
//!
//! The one `unsafe` part of the executable's types, kept to this module: every pointer is
//! read by value out of the packed field (never referenced in place), and the inline items
//! are reached through a raw pointer of their own alignment, at most 4 (checked when a
//! vector is made), which the packing keeps.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::alloc::{alloc, dealloc, handle_alloc_error, realloc, Layout};
use std::mem::MaybeUninit;
use std::ptr::{addr_of, addr_of_mut, NonNull};

/// Up to `N` items themselves, or (more) the heap array.
#[repr(C)]
union Store<T: Copy, const N: usize> {
    inline: MaybeUninit<[T; N]>,
    many: NonNull<T>,
}

impl<T: Copy, const N: usize> Clone for Store<T, N> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Copy, const N: usize> Copy for Store<T, N> {}

/// A vector of `Copy` items of alignment at most 4 holding up to `N` of them inline (see the
/// module docs): a slice through `Deref`, with `push`.
#[repr(C, packed(4))]
pub struct PackedVec<T: Copy, const N: usize> {
    len: u32,
    store: Store<T, N>,
}

// SAFETY: a `PackedVec` owns its items as a `Vec` does (no sharing, no interior mutability).
unsafe impl<T: Copy + Send, const N: usize> Send for PackedVec<T, N> {}
// SAFETY: as above; `&PackedVec` gives only shared reads.
unsafe impl<T: Copy + Sync, const N: usize> Sync for PackedVec<T, N> {}

/// The capacity of a heap array holding `len` items.
fn capacity(len: usize) -> usize {
    len.checked_next_power_of_two()
        .expect("packed vector: capacity overflow")
}

fn layout<T>(cap: usize) -> Layout {
    Layout::array::<T>(cap).expect("packed vector: capacity overflow")
}

impl<T: Copy, const N: usize> PackedVec<T, N> {
    /// The items' alignment is within the packing, and some fit inline.
    const FITS: () = assert!(std::mem::align_of::<T>() <= 4 && N >= 1 && size_of::<T>() > 0);

    /// No items.
    #[inline]
    pub const fn new() -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::FITS;
        PackedVec {
            len: 0,
            store: Store {
                inline: MaybeUninit::uninit(),
            },
        }
    }

    /// The items of `items`.
    #[inline]
    pub fn from_slice(items: &[T]) -> Self {
        let mut v = Self::new();
        v.extend_from_slice(items);
        v
    }

    /// Adds `item` after the others.
    #[inline]
    pub fn push(&mut self, item: T) {
        let len = self.len as usize;
        if len < N {
            // SAFETY: the inline room holds `N` > `len` items.
            unsafe { self.as_mut_ptr().add(len).write(item) };
            self.len += 1;
        } else {
            self.push_to_array(item);
        }
    }

    /// [`PackedVec::push`] of an item past the inline room.
    #[inline(never)]
    fn push_to_array(&mut self, item: T) {
        let len = self.len as usize;
        let count = u32::try_from(len + 1).expect("packed vector: more than 2^32 - 1 items");
        if len == N {
            let p = allocate::<T>(capacity(N + 1));
            // SAFETY: `p` has room for more than `N` + 1 items; the inline ones are initialised.
            unsafe {
                std::ptr::copy_nonoverlapping(self.as_ptr(), p.as_ptr(), N);
                p.as_ptr().add(N).write(item);
            }
            self.store = Store { many: p };
        } else {
            // SAFETY: more than `N` items are in the array, of `capacity(len)` room.
            let mut p = unsafe { self.store.many };
            if len == capacity(len) {
                p = grow(p, len, capacity(len + 1));
                self.store = Store { many: p };
            }
            // SAFETY: the array has room for `capacity(len + 1)` > `len` items.
            unsafe { p.as_ptr().add(len).write(item) };
        }
        self.len = count;
    }

    /// Adds `items` after the others.
    #[inline]
    pub fn extend_from_slice(&mut self, items: &[T]) {
        for &x in items {
            self.push(x);
        }
    }

    /// Whether the items are in a heap array (more than `N` of them).
    #[inline]
    pub fn spilled(&self) -> bool {
        self.len as usize > N
    }

    /// Items the vector holds without allocating again.
    pub fn capacity(&self) -> usize {
        if self.spilled() {
            capacity(self.len as usize)
        } else {
            N
        }
    }

    #[inline]
    fn as_ptr(&self) -> *const T {
        if self.spilled() {
            // SAFETY: more than `N` items are in the array (the pointer read by value).
            let store = self.store;
            unsafe { store.many.as_ptr() }
        } else {
            // The inline items: 4-aligned in a 4-packed struct, as `T` needs (`FITS`).
            addr_of!(self.store).cast::<T>()
        }
    }

    #[inline]
    fn as_mut_ptr(&mut self) -> *mut T {
        if self.spilled() {
            // SAFETY: as in `as_ptr`.
            let store = self.store;
            unsafe { store.many.as_ptr() }
        } else {
            addr_of_mut!(self.store).cast::<T>()
        }
    }
}

fn allocate<T>(cap: usize) -> NonNull<T> {
    let layout = layout::<T>(cap);
    // SAFETY: the layout is of at least 2 items, none zero-sized (`FITS`).
    let p = unsafe { alloc(layout) }.cast::<T>();
    NonNull::new(p).unwrap_or_else(|| handle_alloc_error(layout))
}

fn grow<T>(p: NonNull<T>, old: usize, new: usize) -> NonNull<T> {
    let new_layout = layout::<T>(new);
    // SAFETY: `p` was allocated with `layout(old)`; the new size is not zero.
    let q = unsafe { realloc(p.as_ptr().cast(), layout::<T>(old), new_layout.size()) };
    NonNull::new(q.cast()).unwrap_or_else(|| handle_alloc_error(new_layout))
}

impl<T: Copy, const N: usize> Drop for PackedVec<T, N> {
    fn drop(&mut self) {
        if self.spilled() {
            let store = self.store;
            // SAFETY: the array was allocated with `layout(capacity(len))`.
            unsafe {
                dealloc(
                    store.many.as_ptr().cast(),
                    layout::<T>(capacity(self.len as usize)),
                )
            };
        }
    }
}

impl<T: Copy, const N: usize> std::ops::Deref for PackedVec<T, N> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `as_ptr` points at `len` initialised items (none: an aligned pointer).
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len as usize) }
    }
}

impl<T: Copy, const N: usize> std::ops::DerefMut for PackedVec<T, N> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        let len = self.len as usize;
        // SAFETY: as in `deref`, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), len) }
    }
}

impl<T: Copy, const N: usize> Default for PackedVec<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy, const N: usize> Clone for PackedVec<T, N> {
    fn clone(&self) -> Self {
        Self::from_slice(self)
    }
}

impl<T: Copy + PartialEq, const N: usize> PartialEq for PackedVec<T, N> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Copy + Eq, const N: usize> Eq for PackedVec<T, N> {}

impl<T: Copy + std::fmt::Debug, const N: usize> std::fmt::Debug for PackedVec<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Copy, const N: usize> FromIterator<T> for PackedVec<T, N> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut v = Self::new();
        v.extend(iter);
        v
    }
}

impl<T: Copy, const N: usize> Extend<T> for PackedVec<T, N> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        for x in iter {
            self.push(x);
        }
    }
}

impl<'a, T: Copy, const N: usize> IntoIterator for &'a PackedVec<T, N> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a, T: Copy, const N: usize> IntoIterator for &'a mut PackedVec<T, N> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

/// A sequence of items in files, as a `Vec` or `SmallVec` is.
impl<T: Copy + Serialize, const N: usize> Serialize for PackedVec<T, N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de, T: Copy + Deserialize<'de>, const N: usize> Deserialize<'de> for PackedVec<T, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<T>::deserialize(d)?;
        if u32::try_from(v.len()).is_err() {
            return Err(serde::de::Error::custom(
                "a list of more than 2^32 - 1 items",
            ));
        }
        Ok(Self::from_slice(&v))
    }
}

#[cfg(test)]
mod tests {
    use super::PackedVec;

    /// A 12-byte, 4-aligned item, as an operand is.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    struct Item(u32, u32, u32);

    fn item(i: u32) -> Item {
        Item(i, 8 * i, i % 3)
    }

    #[test]
    fn sizes_are_the_count_and_the_inline_items_4_aligned() {
        use std::mem::{align_of, size_of};
        // The union of the inline items and the pointer is a multiple of 8 bytes.
        assert_eq!(size_of::<PackedVec<Item, 1>>(), 20);
        assert_eq!(size_of::<PackedVec<Item, 4>>(), 52);
        assert_eq!(size_of::<PackedVec<[u32; 2], 1>>(), 12);
        assert_eq!(align_of::<PackedVec<Item, 4>>(), 4);
    }

    /// Pushes, reads, writes, clones and drops agree with a `Vec` at every count from none
    /// to past several doublings, for one, three and four items inline. Under
    /// AddressSanitizer (`RUSTFLAGS=-Zsanitizer=address cargo +nightly test -p ipusim-exe
    /// --lib --target x86_64-unknown-linux-gnu packed_vec`) the module's tests report
    /// nothing, and a push that skips its growth is caught as a heap-buffer-overflow
    /// (checked 2026-12-05).
    #[test]
    fn items_behave_as_a_vec_through_every_growth() {
        fn check<const N: usize>() {
            let mut d = PackedVec::<Item, N>::new();
            let mut v: Vec<Item> = Vec::new();
            assert!(d.is_empty());
            for i in 0..300 {
                d.push(item(i));
                v.push(item(i));
                assert_eq!(&*d, v.as_slice(), "N = {N}, after {} pushes", i + 1);
                assert_eq!(d.spilled(), v.len() > N);
                assert!(d.capacity() >= d.len());
                if i % 37 == 0 || i < 6 {
                    let c = d.clone();
                    assert_eq!(&*c, v.as_slice());
                    assert_eq!(c, d);
                }
            }
            for (k, x) in (&mut d).into_iter().enumerate() {
                x.2 = k as u32;
            }
            assert!(d.iter().enumerate().all(|(k, x)| x.2 == k as u32));
            let few: PackedVec<Item, N> = (0..N as u32).map(item).collect();
            assert_eq!((few.len(), few.spilled()), (N, false));
            let mut few = few;
            few[N - 1].0 = 99;
            assert_eq!(few[N - 1].0, 99);
            assert_ne!(few, PackedVec::from_slice(&[item(7); 9]));
        }
        check::<1>();
        check::<3>();
        check::<4>();
    }

    #[test]
    fn files_hold_a_sequence_of_items() {
        for n in [0, 1, 2, 4, 5, 9] {
            let d: PackedVec<Item, 4> = (0..n).map(item).collect();
            let text = ron::to_string(&d).unwrap();
            let v: Vec<Item> = (0..n).map(item).collect();
            assert_eq!(text, ron::to_string(&v).unwrap());
            assert_eq!(ron::from_str::<PackedVec<Item, 4>>(&text).unwrap(), d);
        }
    }
}
