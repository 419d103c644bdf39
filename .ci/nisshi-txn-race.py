"""Reproduces, without Floe, the test broker's loss of acknowledged transactional records
(issue 31: the lifecycle campaign's first-window Kafka loss). Not run by CI.

    pip install kafka-python   # 3.0.12 was used
    ~/.cache/floe-kafka-broker/bin/nisshi broker --listener-url tcp://127.0.0.1:39092 \
        --advertised-listener-url tcp://127.0.0.1:39092 --storage-engine memory://floe/ &
    python3 .ci/nisshi-txn-race.py 20

For each of N fresh 2-partition topics, 4 transactional producers (ids of their own,
init_transactions first) each begin a transaction, send 8 keyed records and commit, at once;
a read_uncommitted consumer then counts the records from the beginning. Against nisshi 0.7.0-pre.2
with the patch's earlier fixes only: every commit succeeded, and 16 of 640 records (2026-12-04),
then 6 of 640 (2026-12-04, another run) were missing, always those at offset 0 of a partition:
ListOffsets answered the earliest offset with the batch written first, not the lowest offset.
With the patch's list_offsets fix: 0 of 1,280 (40 topics).
"""
import threading, time, sys
from kafka import KafkaProducer, KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
B='127.0.0.1:39092'
admin=KafkaAdminClient(bootstrap_servers=B)
lost=0; total=0
for t in range(int(sys.argv[1])):
    topic=f"tx-{t}"
    admin.create_topics([NewTopic(topic, 2, 1)])
    time.sleep(0.2)
    prods=[KafkaProducer(bootstrap_servers=B, transactional_id=f"{topic}-{i}") for i in range(4)]
    for p in prods: p.init_transactions()
    barrier=threading.Barrier(4)
    def go(i):
        p=prods[i]; barrier.wait()
        p.begin_transaction()
        for j in range(8):
            p.send(topic, key=f"k{(i*8+j)%23}".encode(), value=f"{i}-{j}".encode())
        p.commit_transaction()
    ts=[threading.Thread(target=go,args=(i,)) for i in range(4)]
    [x.start() for x in ts]; [x.join() for x in ts]
    c=KafkaConsumer(bootstrap_servers=B, consumer_timeout_ms=2000, enable_auto_commit=False, isolation_level='read_uncommitted')
    c.assign([TopicPartition(topic,0),TopicPartition(topic,1)]); c.seek_to_beginning()
    got=[m.value for m in c]
    total+=32; lost+=32-len(got)
    if len(got)!=32: print(topic, len(got), sorted(set(g.decode().split('-')[0] for g in got)))
print("lost", lost, "of", total)
