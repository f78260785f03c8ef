/* CRC32C (Castagnoli) for the compiled modules, ccodec/ and tar/_ctar.c.
 *
 * A module of one translation unit (_ctar.c) includes it as it is: every
 * function is static, so each extension holds its own tables (filled by
 * crc_init() in its module init). A module of several units (ccodec/) defines
 * SC_CRC_SHARED before including it: the tables are then one copy, defined by
 * the unit that also defines SC_CRC_DEFINE (ccodec/crc.c, whose crc_init the
 * module init calls), and crc32c() stays inline in every unit. Slicing-by-8 in
 * software; the SSE4.2 CRC32 instruction on three interleaved streams where the
 * CPU has it (checked at run time). Results equal the crc32c package's.
 */
#ifndef SHARDCAT_CRC32C_H
#define SHARDCAT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define SC_HAVE_SSE42 1
#include <nmmintrin.h>
#endif

/* little-endian loads */
static inline uint32_t ld32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t ld64(const unsigned char *p) { return (uint64_t)ld32(p) | ((uint64_t)ld32(p + 4) << 32); }

/* ------------------------------------------------------------------------ */
/* CRC32C                                                                    */

#define POLY 0x82f63b78u /* Castagnoli, reflected */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

#if !defined(SC_CRC_SHARED)
#define SC_CRC_STORAGE static
#define SC_CRC_TABLES_HERE 1
#elif defined(SC_CRC_DEFINE)
#define SC_CRC_STORAGE
#define SC_CRC_TABLES_HERE 1
#else
#define SC_CRC_STORAGE extern
#endif
#if defined(__GNUC__) || defined(__clang__)
#define SC_MAYBE_UNUSED __attribute__((unused))
#else
#define SC_MAYBE_UNUSED
#endif

SC_CRC_STORAGE uint32_t crc_table[8][256];
SC_CRC_STORAGE uint32_t shift_long[4][256];  /* multiply a CRC register by x^(8 * LONG_BLOCK) */
SC_CRC_STORAGE uint32_t shift_short[4][256]; /* ... by x^(8 * SHORT_BLOCK) */
SC_CRC_STORAGE int have_sse42;

#ifdef SC_CRC_TABLES_HERE

/* a * b modulo the polynomial, in the reflected bit order (x^0 is bit 31). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = (uint32_t)1 << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

/* x^(8 n) modulo the polynomial: the operator that appends n zero bytes. */
static uint32_t zeros_operator(size_t n)
{
    uint32_t result = (uint32_t)1 << 31; /* x^0 */
    uint32_t square = (uint32_t)1 << 30; /* x^1, squared up to x^(2^k) */
    size_t bits = n * 8;
    while (bits) {
        if (bits & 1)
            result = multmodp(square, result);
        square = multmodp(square, square);
        bits >>= 1;
    }
    return result;
}

static void shift_table(uint32_t table[4][256], size_t n)
{
    /* Multiplying by a constant is linear: four byte-wise tables compose it. */
    uint32_t op = zeros_operator(n);
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++)
            table[k][v] = multmodp(op, v << (8 * k));
}

#ifdef SC_CRC_SHARED
void crc_init(void)
#else
static void crc_init(void)
#endif
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            crc_table[k][n] = (crc_table[k - 1][n] >> 8) ^ crc_table[0][crc_table[k - 1][n] & 0xff];
    shift_table(shift_long, LONG_BLOCK);
    shift_table(shift_short, SHORT_BLOCK);
#ifdef SC_HAVE_SSE42
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}
#else
void crc_init(void);
#endif /* SC_CRC_TABLES_HERE */

static inline uint32_t shift(uint32_t table[4][256], uint32_t crc)
{
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^
           table[3][crc >> 24];
}

SC_MAYBE_UNUSED static uint32_t crc_sw(uint32_t crc, const unsigned char *buf, size_t len)
{
    uint32_t c = ~crc;
    while (len && ((uintptr_t)buf & 7)) {
        c = crc_table[0][(c ^ *buf++) & 0xff] ^ (c >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t w = ld64(buf) ^ c;
        c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^ crc_table[5][(w >> 16) & 0xff] ^
            crc_table[4][(w >> 24) & 0xff] ^ crc_table[3][(w >> 32) & 0xff] ^
            crc_table[2][(w >> 40) & 0xff] ^ crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        buf += 8;
        len -= 8;
    }
    while (len--)
        c = crc_table[0][(c ^ *buf++) & 0xff] ^ (c >> 8);
    return ~c;
}

#ifdef SC_HAVE_SSE42
#if defined(__x86_64__)
#define CRC_WORD uint64_t
#define CRC_STEP(c, p) ((uint32_t)_mm_crc32_u64((c), ld64(p)))
#else
#define CRC_WORD uint32_t
#define CRC_STEP(c, p) _mm_crc32_u32((c), ld32(p))
#endif

/* One crc32 instruction has a latency of three cycles and a throughput of
   one: three independent streams keep the unit busy, and the shift tables
   join them (register(A B C) = shift(shift(reg A) ^ reg B) ^ reg C). */
__attribute__((target("sse4.2"))) SC_MAYBE_UNUSED static uint32_t crc_hw(uint32_t crc, const unsigned char *buf, size_t len)
{
    uint32_t c0 = ~crc;
    const size_t w = sizeof(CRC_WORD);
    while (len && ((uintptr_t)buf & (w - 1))) {
        c0 = _mm_crc32_u8(c0, *buf++);
        len--;
    }
    while (len >= 3 * LONG_BLOCK) {
        uint32_t c1 = 0, c2 = 0;
        const unsigned char *end = buf + LONG_BLOCK;
        do {
            c0 = CRC_STEP(c0, buf);
            c1 = CRC_STEP(c1, buf + LONG_BLOCK);
            c2 = CRC_STEP(c2, buf + 2 * LONG_BLOCK);
            buf += w;
        } while (buf < end);
        c0 = shift(shift_long, c0) ^ c1;
        c0 = shift(shift_long, c0) ^ c2;
        buf += 2 * LONG_BLOCK;
        len -= 3 * LONG_BLOCK;
    }
    while (len >= 3 * SHORT_BLOCK) {
        uint32_t c1 = 0, c2 = 0;
        const unsigned char *end = buf + SHORT_BLOCK;
        do {
            c0 = CRC_STEP(c0, buf);
            c1 = CRC_STEP(c1, buf + SHORT_BLOCK);
            c2 = CRC_STEP(c2, buf + 2 * SHORT_BLOCK);
            buf += w;
        } while (buf < end);
        c0 = shift(shift_short, c0) ^ c1;
        c0 = shift(shift_short, c0) ^ c2;
        buf += 2 * SHORT_BLOCK;
        len -= 3 * SHORT_BLOCK;
    }
    while (len >= w) {
        c0 = CRC_STEP(c0, buf);
        buf += w;
        len -= w;
    }
    while (len--)
        c0 = _mm_crc32_u8(c0, *buf++);
    return ~c0;
}
#endif

static inline uint32_t crc32c(uint32_t crc, const unsigned char *buf, size_t len)
{
#ifdef SC_HAVE_SSE42
    if (have_sse42)
        return crc_hw(crc, buf, len);
#endif
    return crc_sw(crc, buf, len);
}

#endif /* SHARDCAT_CRC32C_H */
