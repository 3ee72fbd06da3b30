package seine.connect;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.AvroRuntimeException;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.errors.DataException;
import org.apache.kafka.connect.storage.Converter;

/**
 * Reads the values of Seine's documents topic: each is one Avro record of
 * schemas/document.avsc written with no framing (no magic byte, no schema id, no container
 * header), which no stock converter decodes without a schema registry. The value becomes a
 * Connect Struct whose schema is built from the Avro schema; a null value (a tombstone) stays
 * null, so a sink's delete-on-null applies. Sink side only: nothing is written with it.
 */
public class DocumentAvroConverter implements Converter {
  public static final String SCHEMA_PATH = "schema.path";

  static final ConfigDef CONFIG =
      new ConfigDef()
          .define(
              SCHEMA_PATH,
              ConfigDef.Type.STRING,
              "",
              ConfigDef.Importance.MEDIUM,
              "An Avro schema file (.avsc) the values are written with. Empty: the"
                  + " schemas/document.avsc bundled in this jar when it was built.");

  private org.apache.avro.Schema avro;
  private Schema schema;
  private GenericDatumReader<Object> reader;

  @Override
  public ConfigDef config() {
    return CONFIG;
  }

  @Override
  public String version() {
    String version = getClass().getPackage().getImplementationVersion();
    return version == null ? "unknown" : version;
  }

  @Override
  public void configure(Map<String, ?> configs, boolean isKey) {
    String path = new AbstractConfig(CONFIG, configs, false).getString(SCHEMA_PATH);
    try (InputStream in =
        path.isEmpty()
            ? getClass().getResourceAsStream("document.avsc")
            : Files.newInputStream(Path.of(path))) {
      if (in == null) {
        throw new IOException("document.avsc is not in the jar (built without schemas/?)");
      }
      avro = new org.apache.avro.Schema.Parser().parse(in);
    } catch (IOException | AvroRuntimeException e) {
      throw new ConfigException(SCHEMA_PATH, path, "no Avro schema read: " + e);
    }
    schema = connectSchema(avro, false);
    reader = new GenericDatumReader<>(avro);
  }

  @Override
  public byte[] fromConnectData(String topic, Schema schema, Object value) {
    throw new UnsupportedOperationException("DocumentAvroConverter only reads (sink connectors)");
  }

  @Override
  public SchemaAndValue toConnectData(String topic, byte[] value) {
    if (value == null) {
      return SchemaAndValue.NULL; // a tombstone stays one: the sink deletes the id
    }
    try {
      BinaryDecoder in = DecoderFactory.get().binaryDecoder(value, null);
      Object record = reader.read(null, in);
      // Bytes after the record: these were not written as one Document.
      if (!in.isEnd()) {
        throw new IOException("bytes left over after the record");
      }
      return new SchemaAndValue(schema, connectValue(schema, record));
    } catch (IOException | RuntimeException e) {
      throw new DataException(
          String.format(
              "%s: a value of %d bytes is not one schemaless Avro %s record: %s",
              topic, value.length, avro.getFullName(), e),
          e);
    }
  }

  /** record: STRUCT; ["null", T]: optional T; enum: STRING; fixed: BYTES; maps: string keys. */
  static Schema connectSchema(org.apache.avro.Schema avro, boolean optional) {
    SchemaBuilder builder;
    switch (avro.getType()) {
      case RECORD -> {
        builder = SchemaBuilder.struct().name(avro.getFullName());
        for (org.apache.avro.Schema.Field field : avro.getFields()) {
          builder.field(field.name(), connectSchema(field.schema(), false));
        }
      }
      case UNION -> {
        List<org.apache.avro.Schema> types = avro.getTypes();
        List<org.apache.avro.Schema> other =
            types.stream().filter(t -> t.getType() != org.apache.avro.Schema.Type.NULL).toList();
        if (types.size() != 2 || other.size() != 1) {
          throw new ConfigException("only [\"null\", T] unions are supported, not " + avro);
        }
        return connectSchema(other.get(0), true);
      }
      case ARRAY -> builder = SchemaBuilder.array(connectSchema(avro.getElementType(), false));
      case MAP -> builder =
          SchemaBuilder.map(Schema.STRING_SCHEMA, connectSchema(avro.getValueType(), false));
      case STRING, ENUM -> builder = SchemaBuilder.string();
      case BYTES, FIXED -> builder = SchemaBuilder.bytes();
      case INT -> builder = SchemaBuilder.int32();
      case LONG -> builder = SchemaBuilder.int64();
      case FLOAT -> builder = SchemaBuilder.float32();
      case DOUBLE -> builder = SchemaBuilder.float64();
      case BOOLEAN -> builder = SchemaBuilder.bool();
      default -> throw new ConfigException("unsupported Avro type " + avro);
    }
    return (optional ? builder.optional() : builder).build();
  }

  /** Avro's generic value as Connect wants it: Utf8 to String, ByteBuffer to byte[]. */
  static Object connectValue(Schema schema, Object value) {
    if (value == null) {
      return null;
    }
    return switch (schema.type()) {
      case STRUCT -> {
        Struct struct = new Struct(schema);
        for (Field field : schema.fields()) {
          Object item = ((GenericRecord) value).get(field.name());
          struct.put(field, connectValue(field.schema(), item));
        }
        yield struct;
      }
      case ARRAY -> {
        List<Object> out = new ArrayList<>();
        ((List<?>) value).forEach(item -> out.add(connectValue(schema.valueSchema(), item)));
        yield out;
      }
      case MAP -> {
        Map<String, Object> out = new LinkedHashMap<>();
        ((Map<?, ?>) value)
            .forEach((k, v) -> out.put(k.toString(), connectValue(schema.valueSchema(), v)));
        yield out;
      }
      case STRING -> value.toString();
      case BYTES -> value instanceof GenericFixed fixed ? fixed.bytes() : bytes((ByteBuffer) value);
      default -> value; // Integer, Long, Float, Double, Boolean: already Connect's types
    };
  }

  private static byte[] bytes(ByteBuffer buffer) {
    byte[] out = new byte[buffer.remaining()];
    buffer.duplicate().get(out);
    return out;
  }
}
