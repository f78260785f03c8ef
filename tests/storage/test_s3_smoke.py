import shardcat


def test_shard_round_trip_on_s3(s3):
    url = f"{s3['url']}/ds/train-000000.shard"
    opts = s3["storage_options"]
    with shardcat.ShardWriter(url, storage_options=opts) as w:
        for i in range(50):
            w.add(f"k{i}", {"txt": f"v{i}"})
    r = shardcat.ShardReader(url, storage_options=opts)
    assert len(r) == 50
    assert r.get("k7")["txt"].decode() == "v7"
    assert r.verify().records == 50
