/* A catalog row's spans (records.spans): where each of a record's entries
 * lies, read one entry at a time. format/spans.py is the reference and says
 * why the packings look as they do; the fuzzers compare this reader with its
 * unpack_spans on random values (tests/fuzz/test_fuzz_codec.py).
 *
 *   narrow  (12 n bytes): offset u32 | size u32 | crc u32
 *   wide    (20 n bytes): offset u64 | size u64 | crc u32
 *   compact (other):      gap varint | size varint | crc u32, offset = the
 *                         previous entry's end + gap; one zero byte appended
 *                         when the entries take exactly 12 n or 20 n bytes.
 *
 * Usage: span_reader_start, then span_next n times (each 0 on a malformed
 * value), then span_reader_finished (0 when bytes are left over). */
#ifndef SHARDCAT_CCODEC_SPANS_H
#define SHARDCAT_CCODEC_SPANS_H

#include <stdint.h>
#include "../_crc32c.h" /* ld32, ld64 */

typedef struct {
    uint64_t offset, size;
    uint32_t crc;
} Span;

typedef struct {
    const unsigned char *start, *at, *end;
    uint64_t count;    /* entries the layout has */
    int width;         /* 12, 20, or 0 for compact */
    uint64_t last_end; /* compact: the previous entry's end */
} SpanReader;

static inline void span_reader_start(SpanReader *r, const unsigned char *value, uint64_t len, uint64_t count)
{
    r->start = r->at = value;
    r->end = value + len;
    r->count = count;
    r->width = len == 12 * count ? 12 : len == 20 * count ? 20 : 0;
    r->last_end = 0;
}

/* A varint no longer than needed and below 2**64 (format/spans.py's _read_varint). */
static inline int span_varint(SpanReader *r, uint64_t *out)
{
    uint64_t value = 0;
    for (int k = 0; k < 10; k++) {
        if (r->at == r->end)
            return 0;
        unsigned byte = *r->at++;
        if (k == 9 && byte > 1)
            return 0;
        value |= (uint64_t)(byte & 0x7F) << (7 * k);
        if (!(byte & 0x80)) {
            if (k > 0 && byte == 0)
                return 0;
            *out = value;
            return 1;
        }
    }
    return 0;
}

/* The next entry into *out: 1, or 0 if the value is malformed there. Call it
   at most `count` times. */
static inline int span_next(SpanReader *r, Span *out)
{
    if (r->width == 12) {
        out->offset = ld32(r->at), out->size = ld32(r->at + 4), out->crc = ld32(r->at + 8);
        r->at += 12;
        return 1;
    }
    if (r->width == 20) {
        out->offset = ld64(r->at), out->size = ld64(r->at + 8), out->crc = ld32(r->at + 16);
        r->at += 20;
        return 1;
    }
    uint64_t gap, size;
    if (!span_varint(r, &gap) || !span_varint(r, &size) || r->end - r->at < 4)
        return 0;
    /* Every end below 2**64: neither sum may wrap. */
    if (gap > UINT64_MAX - r->last_end || size > UINT64_MAX - (r->last_end + gap))
        return 0;
    out->offset = r->last_end + gap;
    out->size = size;
    out->crc = ld32(r->at);
    r->at += 4;
    r->last_end = out->offset + size;
    return 1;
}

/* After `count` entries: 1 if the value held exactly them (or them and its pad byte). */
static inline int span_reader_finished(const SpanReader *r)
{
    if (r->at == r->end)
        return 1;
    uint64_t used = (uint64_t)(r->at - r->start);
    return r->width == 0 && r->count > 0 && r->end - r->at == 1 && *r->at == 0 &&
           (used == 12 * r->count || used == 20 * r->count);
}

#endif /* SHARDCAT_CCODEC_SPANS_H */
