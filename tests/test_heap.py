"""The C heap's freed pages handed back to the kernel (keras_electra.training.heap)."""

import ctypes

import pytest
import tensorflow as tf

from keras_electra.training import heap

glibc_only = pytest.mark.skipif(heap._malloc_trim() is None, reason="no malloc_trim here")


def anon_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon")


@glibc_only
def test_release_free_heap_returns_the_free_pages_inside_the_heap():
    """Blocks freed in the middle of the heap stay resident until the trim: glibc
    trims only the heap's top, which a block still in use holds here."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size, count = 16_000, 12_000  # 192 MB of small blocks (below mmap's threshold)
    blocks = [libc.malloc(size) for _ in range(count)]
    for b in blocks:
        ctypes.memset(b, 1, size)
    for i, b in enumerate(blocks):
        if i % 64 != 63:  # keep every 64th: the heap cannot shrink from its top
            libc.free(b)
    before = anon_mb()
    released = heap.release_free_heap()
    after = anon_mb()
    for b in blocks[63::64]:
        libc.free(b)
    assert released
    assert before - after > 100, (before, after)


def test_first_calls_trim_trims_on_its_first_runs_only(monkeypatch):
    calls = []
    monkeypatch.setattr(heap, "release_free_heap", lambda: calls.append(1) or True)
    trim = heap.FirstCallsTrim(calls=2)

    @tf.function
    def step(x):
        with tf.control_dependencies([trim.op()]):
            return tf.identity(x) + 1.0

    results = [float(step(tf.constant(1.0))) for _ in range(4)]
    assert results == [2.0] * 4
    assert len(calls) == 2 and trim.calls_left == 0


def test_no_trim_where_the_train_function_runs_without_this_process(monkeypatch):
    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)
    assert heap.trim_before_reading(tf.distribute.get_strategy()) is None
    assert heap.release_free_heap() is False
