import org.apache.flume.Event; import org.apache.flume.source.*; import io.netty.buffer.ByteBuf;
import java.io.*; import java.util.*; import java.time.*; import java.nio.*; import java.nio.charset.*;
public class Gold {
  static String hex(byte[] b){StringBuilder s=new StringBuilder(); for(byte x:b) s.append(String.format("%02x",x&0xff)); return s.toString();}
  static byte[] unhex(String s){byte[] b=new byte[s.length()/2]; for(int i=0;i<b.length;i++) b[i]=(byte)Integer.parseInt(s.substring(2*i,2*i+2),16); return b;}
  static String out(Event e){ TreeMap<String,String> h=new TreeMap<>(e.getHeaders()); StringBuilder s=new StringBuilder("event");
    for(Map.Entry<String,String> x:h.entrySet()){ String v=x.getValue(); if(x.getKey().equals("timestamp")&&Math.abs(Long.parseLong(v)-System.currentTimeMillis())<600000) v="NOW"; s.append(" ").append(x.getKey()).append("=").append(v);} s.append(" body=").append(hex(e.getBody())); return s.toString(); }
  public static void main(String[] a) throws Exception {
    long now=Long.parseLong(a[0]); Clock clock=Clock.fixed(Instant.ofEpochMilli(now), ZoneId.systemDefault());
    org.joda.time.DateTimeUtils.setCurrentMillisFixed(now);
    BufferedReader r=new BufferedReader(new InputStreamReader(System.in)); String line;
    while((line=r.readLine())!=null){ String[] f=line.split(" "); String kind=f[0], keep=f[1]; int size=Integer.parseInt(f[2]); byte[] data=unhex(f.length>3?f[3]:"");
      System.out.println("case "+line);
      Set<String> kf=SyslogUtils.chooseFieldsToKeep(keep);
      try {
      if(kind.equals("tcp")){ SyslogUtils u=new SyslogUtils(size,kf,false,clock); ByteBuf b=new ByteBuf(data);
        while(b.isReadable()){ Event e=u.extractEvent(b); if(e!=null) System.out.println(out(e)); } }
      else if(kind.equals("udp")){ SyslogUtils u=new SyslogUtils(2048,kf,true,clock); u.setEventSize(1<<16);
        try{ Event e=u.extractEvent(new ByteBuf(data)); if(e!=null) System.out.println(out(e)); } catch(RuntimeException ex){ System.out.println("readfail"); } }
      else { SyslogParser p=new SyslogParser(); CharsetDecoder dec=StandardCharsets.UTF_8.newDecoder(); String msg;
        try { msg=dec.decode(ByteBuffer.wrap(data)).toString(); } catch(CharacterCodingException ex){ System.out.println("invalid-charset"); continue; }
        try { Event e=p.parseMessage(msg, StandardCharsets.UTF_8, kf); if(size==1) e.getHeaders().put("flume.syslog.status","Incomplete"); System.out.println(out(e)); }
        catch(IllegalArgumentException ex){ System.out.println("invalid"); }
        catch(RuntimeException ex){ System.out.println("crash "+ex.getClass().getSimpleName()); } }
      } catch(Exception ex){ System.out.println("crash "+ex); }
    }
  }
}
