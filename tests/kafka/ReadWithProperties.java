// Reads one partition of a topic from its start to its end with Kafka's own Java client,
// configured from a client.properties file only: what `kafka-console-consumer.sh
// --consumer.config FILE` does. Usage: ReadWithProperties FILE TOPIC. Prints key<TAB>value.
import java.io.FileReader;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ReadWithProperties {
  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    try (FileReader reader = new FileReader(args[0])) {
      props.load(reader);
    }
    props.put("key.deserializer", StringDeserializer.class.getName());
    props.put("value.deserializer", StringDeserializer.class.getName());
    props.put("enable.auto.commit", "false");
    props.put("default.api.timeout.ms", "15000");
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
      TopicPartition partition = new TopicPartition(args[1], 0);
      consumer.assign(List.of(partition));
      consumer.seekToBeginning(List.of(partition));
      long end = consumer.endOffsets(List.of(partition)).get(partition);
      long deadline = System.currentTimeMillis() + 30_000;
      while (consumer.position(partition) < end && System.currentTimeMillis() < deadline) {
        for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(500))) {
          System.out.println(record.key() + "\t" + record.value());
        }
      }
    }
  }
}
