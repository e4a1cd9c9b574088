package org.apache.flume.event;
import java.util.*; import java.nio.charset.Charset; import org.apache.flume.Event;
public class EventBuilder {
  static class E implements Event { Map<String,String> h; byte[] b; public Map<String,String> getHeaders(){return h;} public byte[] getBody(){return b;} }
  public static Event withBody(byte[] b, Map<String,String> h){ E e=new E(); e.b=b; e.h=new HashMap<>(); if(h!=null) e.h.putAll(h); return e; }
  public static Event withBody(byte[] b){ return withBody(b,null); }
  public static Event withBody(String s, Charset c, Map<String,String> h){ return withBody(s.getBytes(c), h); }
  public static Event withBody(String s, Charset c){ return withBody(s.getBytes(c), null); }
}
