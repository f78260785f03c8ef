/* The record layout the compiled codec reads and writes: copies of what
 * format/spec.py declares (spec.py is the one statement of the format).
 * tests/format/test_c_layout.py parses this file and compares every value
 * with spec.py, records.py and writer.py, so a change on one side alone
 * fails there, not in a shard. Multi-byte fields are little-endian. */
#ifndef SHARDCAT_CCODEC_LAYOUT_H
#define SHARDCAT_CCODEC_LAYOUT_H

#define HEAD_SIZE 32      /* spec.RECORD_HEAD_DTYPE: tag 4, head_crc u4, record_length u8, key_hash u8, head_length u4, key_length u2, entry_count u2 */
#define HEAD_KEY_LENGTH_AT 28  /* spec.RECORD_HEAD_DTYPE's key_length: its offset in the head */
#define HEAD_ENTRY_COUNT_AT 30 /* spec.RECORD_HEAD_DTYPE's entry_count: its offset in the head */
#define DESC_SIZE 32      /* spec.ENTRY_DESC_DTYPE: payload_offset u8, stored_size u8, payload_crc u4, name_length u2, type_length u2, codec u1, reserved 7 */
#define MAX_ZERO_PAD 4096 /* spec.ALIGNMENTS[-1]: records.py compares pads with a run of zeros this long */
#define BATCH_ROW_SIZE 40 /* spec.BATCH_ROW_DTYPE: blob u4, shard u4, row u4, reserved u4, at u8, length u8, offset u8 */
static const unsigned char RECORD_TAG[4] = {'R', 'E', 'C', 0}; /* spec.RECORD_TAG */

/* Tuning shared with the Python writer and decoder (same values on both paths). */
#define JOIN_LIMIT (64 << 10) /* writer._JOIN_LIMIT: records up to this size are encoded into one bytes object */
#define TEXT_CACHE_MAX 4096   /* records._TEXT_CACHE_MAX */
#define GIL_FREE_CRC (1 << 20) /* records from this size CRC their payloads without the GIL */

#endif /* SHARDCAT_CCODEC_LAYOUT_H */
